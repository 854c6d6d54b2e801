"""Columnar bundles: the fast path for chains of plain Map / FlatMap / Filter / WindowInto steps.

A bundle is held as three parallel lists (values, timestamps in microseconds, window tuples)
instead of one WindowedValue per element, and each step runs over the whole list at once
(`[fn(v) for v in values]`). Only steps whose behaviour is fully described by their function
qualify: Map, MapTuple, FlatMap, Filter and WindowInto without side inputs, extra arguments,
DoFn parameters or a dead-letter output (their DoFns have no lifecycle of their own).

The fast path never decides anything the per-element path would decide differently: when a
function raises, or returns something other than plain values or TimestampedValues (a
TaggedOutput, a WindowedValue), `ColumnarChain.run` returns None and the caller runs the
bundle through `FusedStage.process_bundle`, which gives the usual retries, errors and
outputs. Metric updates of such an abandoned attempt count as attempted only; the abandoned
attempt itself is not one of the bundle's `--max_bundle_attempts`.
"""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Sequence, Tuple

from headrace.metrics.metric import CURRENT, MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import _CallableWrapperDoFn
from headrace.pipeline.pvalue import TaggedOutput
from headrace.runners.kit.dofn_runner import special_params
from headrace.runners.kit.stage import StepSpec

_KINDS = ("map", "maptuple", "flatmap", "filter")


class Columns(NamedTuple):
    """One bundle as parallel lists: values, timestamps (microseconds) and window tuples."""

    values: List[Any]
    ts: List[int]
    windows: List[tuple]

    @staticmethod
    def of_records(records: List[Any]) -> "Columns":
        """A source's records (values or TimestampedValues) as a bundle in the global window."""
        n = len(records)
        if any(type(r) is TimestampedValue for r in records):
            ts = [r.timestamp_us if type(r) is TimestampedValue else MIN_TIMESTAMP_MICROS for r in records]
            values = [r.value if type(r) is TimestampedValue else r for r in records]
            return Columns(values, ts, [GLOBAL_WINDOWS_TUPLE] * n)
        return Columns(records, [MIN_TIMESTAMP_MICROS] * n, [GLOBAL_WINDOWS_TUPLE] * n)

    def elements(self) -> List[WindowedValue]:
        """The bundle as WindowedValues (for the per-element path)."""
        return [WindowedValue(v, t, w) for v, t, w in zip(self.values, self.ts, self.windows)]


def plain_steps(steps: Sequence[StepSpec], root: int) -> Optional[List[Tuple[str, Any, str]]]:
    """(kind, function or WindowFn, label) of each step when `steps` are a linear chain from
    `root` of Map / MapTuple / FlatMap / Filter steps ("window" for WindowInto) fully described
    by their function (no side inputs, extra arguments, DoFn parameters or dead letters)."""
    out: List[Tuple[str, Any, str]] = []
    current = root
    for spec in steps:
        if spec.input != current:
            return None
        if spec.windowfn is not None:
            out.append(("window", spec.windowfn, spec.label))
        else:
            if spec.args or spec.kwargs or spec.dead_letter is not None or spec.main_tag is not None:
                return None
            if len(spec.outputs) != 1 or spec.outputs[0][0] is not None:
                return None
            dofn = coders.loads(spec.dofn or b"")
            if not isinstance(dofn, _CallableWrapperDoFn) or dofn.kind not in _KINDS:
                return None
            if special_params(dofn.fn):
                return None
            out.append((dofn.kind, dofn.fn, spec.label))
        current = spec.outputs[0][1]
    return out


def columnar_chain(steps: Sequence[StepSpec], root: int) -> Optional["ColumnarChain"]:
    """A ColumnarChain for a linear chain of qualifying steps starting at `root`, else None."""
    plain = plain_steps(steps, root)
    if not plain:
        return None
    return ColumnarChain([(kind, fn._assign if kind == "window" else fn, label) for kind, fn, label in plain])


class ColumnarChain:
    """Runs a bundle through a linear chain of plain steps, a list at a time (see module doc)."""

    def __init__(self, ops: List[tuple]) -> None:
        self.ops = ops

    def run(self, cols: Columns, committed: MetricsContainer,
            attempted: MetricsContainer) -> Optional[Columns]:
        """The chain's output for the bundle, or None if the per-element path must run it."""
        container = MetricsContainer()
        try:
            with metrics_scope(container, self.ops[0][2]):
                out = self._run(cols)
        except Exception:
            out = None
        attempted.merge(container)
        if out is not None:
            committed.merge(container)
        return out

    def _run(self, cols: Columns) -> Optional[Columns]:
        values, ts, windows = cols
        current = CURRENT
        for kind, fn, label in self.ops:
            current.step = label
            if kind == "window":
                windows = [fn(v, t, w) for v, t, w in zip(values, ts, windows)]
                continue
            if kind == "filter":
                keep = [bool(fn(v)) for v in values]
                if not all(keep):
                    values = [v for v, k in zip(values, keep) if k]
                    ts = [t for t, k in zip(ts, keep) if k]
                    windows = [w for w, k in zip(windows, keep) if k]
                continue
            if kind == "map":
                out = [fn(v) for v in values]
            elif kind == "maptuple":
                out = [fn(*v) for v in values]
            else:  # flatmap
                results = [fn(v) for v in values]
                if any(r is None or isinstance(r, (str, bytes, dict)) for r in results):
                    return None  # the per-element path treats these specially
                lists = [list(r) for r in results]
                out = [o for lst in lists for o in lst]
                ts = [t for lst, t in zip(lists, ts) for _ in lst]
                windows = [w for lst, w in zip(lists, windows) for _ in lst]
            types = set(map(type, out))
            if TimestampedValue in types:
                if len(types) != 1:
                    return None
                values = [o.value for o in out]
                ts = [o.timestamp_us for o in out]
            elif any(not _plain(t) for t in types):
                return None
            else:
                values = out
        return Columns(values, ts, windows)


def _plain(t: type) -> bool:
    return not (issubclass(t, WindowedValue) or t is TaggedOutput)
