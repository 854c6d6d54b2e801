"""Columnar bundles: the fast path for chains of plain Map / FlatMap / Filter / WindowInto steps.

A bundle is held as parallel lists (`kit.columnar.Columns`) instead of one WindowedValue per
element, and each step runs over the whole list at once with the kit's list operations
(`kit.columnar.map_columns` and its siblings, which the fused stages' columnar run uses too).
Only steps whose behaviour is fully described by their function qualify: Map, MapTuple,
FlatMap, Filter and WindowInto without side inputs, extra arguments, DoFn parameters or a
dead-letter output (their DoFns have no lifecycle of their own).

The fast path never decides anything the per-element path would decide differently: when a
function raises, or returns something other than plain values or TimestampedValues (a
TaggedOutput, a WindowedValue, a FlatMap's str / bytes / dict), `ColumnarChain.run` returns
None and the caller runs the bundle through `FusedStage.process_bundle`, which gives the usual
retries, errors and outputs. Metric updates of such an abandoned attempt count as attempted
only; the abandoned attempt itself is not one of the bundle's `--max_bundle_attempts`.
"""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Tuple

from headrace.metrics.metric import CURRENT, MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.pipeline.dofn import _CallableWrapperDoFn
from headrace.runners.kit.columnar import (
    Columns, filter_columns, flatmap_columns, map_columns, window_columns,
)
from headrace.runners.kit.dofn_runner import special_params
from headrace.runners.kit.stage import StepSpec

_KINDS = ("map", "maptuple", "flatmap", "filter")

__all__ = ["ColumnarChain", "Columns", "columnar_chain", "plain_steps"]


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

    def _run(self, cols: Columns) -> Columns:
        current = CURRENT
        for kind, fn, label in self.ops:
            current.step = label
            if kind == "window":
                cols = window_columns(fn, cols)
            elif kind == "filter":
                cols = filter_columns(fn, cols)
            elif kind in ("map", "maptuple"):
                cols = map_columns(fn, cols, star=kind == "maptuple")
            else:
                cols = flatmap_columns(fn, cols)
        return cols
