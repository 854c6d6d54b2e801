"""Columnar bundles: a fused stage run breadth-first, each step over a whole list at once.

(The one columnar executor of headrace: the Spark runner's vectorised evaluation over Arrow
batches, `spark/fastpath`, takes over only chains of `plain_steps`, and falls back to this.)

A bundle is held as parallel lists (`Columns`: values, timestamps in microseconds, window
tuples, and panes and retraction flags when they are not all the defaults) instead of one
WindowedValue per element. `StagePlan` runs a `kit.stage.FusedStage`'s steps in order, each
over its whole input: a WindowInto and a Map / MapTuple / FlatMap / FlatMapTuple / Filter of
a plain function (no extra arguments, side inputs or DoFn parameters; a dead-letter output
without timeout, subprocess or partial outputs) as one list operation (`map_columns`,
`flatmap_columns`, `filter_columns`, `window_columns`: a Map keeps the metadata lists as they
are); any other step through its own `ParDoRunner` over the whole list (its lifecycle as on
the per-element path: started before its first element, finished after its last, the outputs
of finish_bundle passed on).

The columnar run never decides anything the per-element path would decide differently: when
user code raises, or returns something the per-element path treats specially (a TaggedOutput
or WindowedValue, a FlatMap's str / bytes / dict), the run raises and `FusedStage` runs the
bundle element by element instead, which gives the usual retries, dead letters and errors.
`COLUMNAR = False` (or HEADRACE_COLUMNAR=0 in the environment) turns the columnar run off.

Rules of the representation: lists are never changed in place once built (outputs of a step
share its input's lists where they are unchanged); `panes is None` means every element has
PANE_INFO_UNKNOWN, `retractions is None` that none is a retraction.
"""

from __future__ import annotations

import os
from itertools import chain, compress, repeat, starmap
from types import GeneratorType
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from headrace.metrics.metric import CURRENT
from headrace.model.window import IntervalWindow, Sessions
from headrace.model.windowed import PANE_INFO_UNKNOWN, PaneInfo, TimestampedValue, WindowedValue
from headrace.pipeline.dofn import _CallableWrapperDoFn
from headrace.pipeline.pvalue import TaggedOutput
from headrace.model import coders
from headrace.runners.kit.dofn_runner import AssignWindowsRunner, ParDoRunner, special_params, start_bundle

#: Whether fused stages try the columnar run first (tests and benchmarks switch it off).
COLUMNAR = os.environ.get("HEADRACE_COLUMNAR", "1") != "0"

#: The kinds of callable-wrapper DoFns the columnar run evaluates as list operations.
KINDS = ("map", "maptuple", "flatmap", "flatmaptuple", "filter")

_ITERABLES = frozenset((list, tuple, GeneratorType))


class Abandon(Exception):
    """The columnar run cannot decide this bundle: the per-element path must run it."""


class Columns(NamedTuple):
    """One bundle as parallel lists: values, timestamps (microseconds), window tuples, and
    panes / retraction flags (None when all are PANE_INFO_UNKNOWN / False)."""

    values: List[Any]
    ts: List[int]
    windows: Sequence[Tuple[Any, ...]]   # a list, or `ProtoSessions`
    panes: Optional[List[PaneInfo]] = None
    retractions: Optional[List[bool]] = None

    @staticmethod
    def of_records(records: List[Any], element: WindowedValue) -> "Columns":
        """Records a DoFn output for `element` (values or TimestampedValues: a connector's
        `RecordBlock`) as a bundle: a value takes the element's timestamp, a TimestampedValue
        its own; each takes the element's windows, pane and retraction flag."""
        n = len(records)
        values, ts = records, [element.timestamp_us] * n
        if any(type(r) is TimestampedValue for r in records):
            ts = [r.timestamp_us if type(r) is TimestampedValue else t for r, t in zip(records, ts)]
            values = [r.value if type(r) is TimestampedValue else r for r in records]
        pane = element.pane_info
        return Columns(values, ts, [element.windows] * n,
                       None if pane is PANE_INFO_UNKNOWN else [pane] * n,
                       [True] * n if element.is_retraction else None)

    @staticmethod
    def of_elements(elements: Sequence[WindowedValue]) -> "Columns":
        """WindowedValues as a bundle of columns (exact: panes and retractions kept)."""
        n = len(elements)
        panes: Optional[List[PaneInfo]] = [wv.pane_info for wv in elements]
        if panes and panes[0] is PANE_INFO_UNKNOWN and panes.count(PANE_INFO_UNKNOWN) == n:
            panes = None
        retractions: Optional[List[bool]] = [wv.is_retraction for wv in elements]
        if not any(retractions):  # type: ignore[arg-type]
            retractions = None
        return Columns([wv.value for wv in elements], [wv.timestamp_us for wv in elements],
                       [wv.windows for wv in elements], panes, retractions)

    @staticmethod
    def empty() -> "Columns":
        """A bundle of no elements."""
        return Columns([], [], [])

    def elements(self) -> List[WindowedValue]:
        """The bundle as WindowedValues (for the per-element path)."""
        if self.panes is None and self.retractions is None:
            return list(map(WindowedValue, self.values, self.ts, self.windows))
        n = len(self.values)
        panes = self.panes if self.panes is not None else repeat(PANE_INFO_UNKNOWN, n)
        retr = self.retractions if self.retractions is not None else repeat(False, n)
        return list(map(WindowedValue, self.values, self.ts, self.windows, panes, retr))


# ---- one step over a whole bundle -------------------------------------------------------------

def window_columns(windowfn: Any, cols: Columns) -> Columns:
    """WindowInto: each element's windows from the WindowFn's `_assign(value, timestamp_us,
    windows)`; for `Sessions` over elements in one window each, a `ProtoSessions` column."""
    if type(windowfn) is Sessions and all(len(w) == 1 for w in cols.windows):
        return Columns(cols.values, cols.ts, ProtoSessions(cols.ts, windowfn.gap_size_us),
                       cols.panes, cols.retractions)
    return Columns(cols.values, cols.ts, list(map(windowfn._assign, cols.values, cols.ts, cols.windows)),
                   cols.panes, cols.retractions)


class ProtoSessions(Sequence[Tuple[Any, ...]]):
    """The window column of a bundle after WindowInto(Sessions(gap)) over elements in one
    window each: element i's one window is the proto-session [ts[i], ts[i] + gap), made only
    when read (a lifted combine reads the bounds from `ts` and `gap_us` without it)."""

    __slots__ = ("ts", "gap_us")

    def __init__(self, ts: List[int], gap_us: int) -> None:
        self.ts = ts
        self.gap_us = gap_us

    def __len__(self) -> int:
        return len(self.ts)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return ProtoSessions(self.ts[i], self.gap_us)
        t = self.ts[i]
        return (IntervalWindow._of(t, t + self.gap_us),)

    def __iter__(self) -> Iterator[Tuple[Any, ...]]:
        of, gap = IntervalWindow._of, self.gap_us
        for t in self.ts:
            yield (of(t, t + gap),)

    def __reduce__(self) -> Tuple[Any, ...]:
        return (ProtoSessions, (self.ts, self.gap_us))


def map_columns(fn: Callable[..., Any], cols: Columns, star: bool = False) -> Columns:
    """Map (MapTuple when `star`): one output per element, metadata unchanged but for the
    timestamps of TimestampedValue outputs."""
    out = list(starmap(fn, cols.values)) if star else list(map(fn, cols.values))
    return _outputs(out, cols)


def filter_columns(fn: Callable[[Any], Any], cols: Columns) -> Columns:
    """Filter: the elements for which `fn` is true."""
    keep = list(map(bool, map(fn, cols.values)))
    if all(keep):
        return cols
    return _select(cols, keep)


def flatmap_columns(fn: Callable[..., Any], cols: Columns, star: bool = False) -> Columns:
    """FlatMap (FlatMapTuple when `star`): each element's iterable of outputs, in order; None
    is no output; a str / bytes / dict result abandons the run (the per-element path fails it)."""
    results = list(starmap(fn, cols.values)) if star else list(map(fn, cols.values))
    if not set(map(type, results)) <= _ITERABLES:
        fixed: List[Any] = []
        for r in results:
            if r is None:
                fixed.append(())
            elif isinstance(r, (str, bytes, dict)):
                raise Abandon("a FlatMap returned a str, bytes or dict")
            else:
                fixed.append(r)
        results = fixed
    lists = list(map(list, results))
    lens = list(map(len, lists))
    n = len(lens)
    ones = lens.count(1)
    if ones == n:
        meta = cols
    elif ones + lens.count(0) == n:
        meta = _select(cols, lens)
    else:
        meta = Columns(cols.values, _repeat(cols.ts, lens), _repeat(cols.windows, lens),
                       None if cols.panes is None else _repeat(cols.panes, lens),
                       None if cols.retractions is None else _repeat(cols.retractions, lens))
    return _outputs(list(chain.from_iterable(lists)), meta)


def _repeat(column: Sequence[Any], counts: List[int]) -> List[Any]:
    return list(chain.from_iterable(map(repeat, column, counts)))


def _select(cols: Columns, keep: List[Any]) -> Columns:
    return Columns(list(compress(cols.values, keep)), list(compress(cols.ts, keep)),
                   list(compress(cols.windows, keep)),
                   None if cols.panes is None else list(compress(cols.panes, keep)),
                   None if cols.retractions is None else list(compress(cols.retractions, keep)))


def _outputs(out: List[Any], cols: Columns) -> Columns:
    """`out` as the values of `cols` (whose other lists are parallel to it), as the per-element
    path wraps outputs: a TimestampedValue sets the timestamp; a TaggedOutput or WindowedValue
    abandons the run."""
    types = set(map(type, out))
    stamped = False
    for t in types:
        if t is TimestampedValue:
            stamped = True
        elif t is TaggedOutput or issubclass(t, WindowedValue):
            raise Abandon(f"a step returned a {t.__name__}")
    if not stamped:
        return Columns(out, cols.ts, cols.windows, cols.panes, cols.retractions)
    if len(types) == 1:
        return Columns([o.value for o in out], [o.timestamp_us for o in out], cols.windows,
                       cols.panes, cols.retractions)
    TV = TimestampedValue
    values = [o.value if type(o) is TV else o for o in out]
    ts = [o.timestamp_us if type(o) is TV else t for o, t in zip(out, cols.ts)]
    return Columns(values, ts, cols.windows, cols.panes, cols.retractions)


# ---- a whole fused stage ----------------------------------------------------------------------

class _Data:
    """One PCollection's elements in a bundle, as columns or WindowedValues (each made on demand)."""

    __slots__ = ("cols", "elems")

    def __init__(self, cols: Optional[Columns], elems: Optional[List[WindowedValue]]) -> None:
        self.cols = cols
        self.elems = elems

    def columns(self) -> Columns:
        """The elements as Columns."""
        if self.cols is None:
            self.cols = Columns.of_elements(self.elems or [])
        return self.cols

    def __len__(self) -> int:
        if self.elems is not None:
            return len(self.elems)
        return len(self.cols.values) if self.cols is not None else 0

    def elements(self) -> List[WindowedValue]:
        """The elements as WindowedValues."""
        if self.elems is None:
            self.elems = self.cols.elements() if self.cols is not None else []
        return self.elems


_EMPTY = _Data(Columns([], [], []), [])

# an op: (index of the step, "window" | a KIND | "dofn", input PCollection, main output or None,
#         other outputs)
_Op = Tuple[int, str, int, Optional[int], Tuple[Tuple[Optional[str], int], ...]]


def columnar_kind(runner: Any) -> Optional[str]:
    """How the columnar run evaluates a step's runner: "window", a KIND, or None (through its
    ParDoRunner, element by element over the whole list)."""
    if isinstance(runner, AssignWindowsRunner):
        return "window"
    if not isinstance(runner, ParDoRunner) or not isinstance(runner.dofn, _CallableWrapperDoFn):
        return None
    if runner.kind not in KINDS or not runner.simple or runner.has_side:
        return None
    dl = runner.dead_letter
    if dl is not None and (runner.subprocess is not None or runner.time_limit is not None
                           or dl.get("timeout") or dl.get("use_subprocess") or dl.get("partial")):
        return None
    return runner.kind


class StagePlan:
    """A fused stage's steps compiled for the columnar run (see the module doc); built on the
    worker from the stage's runners, holds none of them."""

    def __init__(self, ops: List[_Op], root: int, materialized: Sequence[int]) -> None:
        self.ops = ops
        self.root = root
        self.materialized = tuple(materialized)

    @staticmethod
    def compile(steps: Sequence[Any], root: int, materialized: Sequence[int],
                runners: Sequence[Any]) -> Optional["StagePlan"]:
        """The plan of `steps` (StepSpecs) given their runners, or None when the columnar run
        does not apply: a step reads a PCollection no earlier step produced, or no step would
        run as a list operation."""
        known = {root}
        ops: List[_Op] = []
        columnar = False
        for i, (spec, runner) in enumerate(zip(steps, runners)):
            if spec.input not in known:
                return None
            kind = columnar_kind(runner)
            main_tag = getattr(runner, "main_tag", None)
            outputs = tuple((tag, pc) for tag, pc in spec.outputs
                            if tag is None or tag != main_tag)
            main = next((pc for tag, pc in outputs if tag is None), None)
            dead = (getattr(spec, "dead_letter", None) or {}).get("tag")
            if kind is not None and (getattr(spec, "drop_unknown_tags", False)
                                     or any(tag not in (None, dead) for tag, _ in outputs)):
                # a function with tagged outputs returns TaggedOutputs, which a list operation
                # would abandon the run for on every bundle (running its steps twice): it runs
                # through its ParDoRunner instead
                kind = None
            if kind is None:
                ops.append((i, "dofn", spec.input, main, outputs))
            else:
                if main is None:
                    return None
                columnar = True
                ops.append((i, kind, spec.input, main, tuple(o for o in outputs if o[0] is not None)))
            known.update(pc for _, pc in spec.outputs)
        if not columnar or len(ops) != len(steps):
            return None
        return StagePlan(ops, root, materialized)

    def run(self, runners: Sequence[Any], root: _Data, side_inputs: Any,
            tally: Optional[Dict[str, int]] = None) -> Dict[int, _Data]:
        """Runs one bundle (the root PCollection's elements) through every step; returns the
        materialised outputs by PCollection id, and adds the elements each step read to `tally`
        (by label) when given. Raises whatever stops it (the caller falls back to the
        per-element path): call inside the attempt's metrics scope."""
        start_bundle(runners, side_inputs)
        data: Dict[int, _Data] = {self.root: root}
        current = CURRENT
        for i, kind, src, main, others in self.ops:
            r = runners[i]
            inp = data.get(src, _EMPTY)
            if tally is not None:
                tally[r.label] += len(inp)
            if kind == "dofn":
                for pc, lst in _run_dofn(r, inp.elements(), others).items():
                    data[pc] = _Data(None, lst)
                continue
            assert main is not None
            current.step = r.label
            cols = inp.columns()
            if not cols.values:
                out = cols
            elif kind == "window":
                out = window_columns(r.windowfn, cols)
            elif kind == "map":
                out = map_columns(r.fn, cols)
            elif kind == "maptuple":
                out = map_columns(r.fn, cols, star=True)
            elif kind == "filter":
                out = filter_columns(r.fn, cols)
            else:
                out = flatmap_columns(r.fn, cols, star=kind == "flatmaptuple")
            data[main] = _Data(out, None)
            for _, pc in others:
                data[pc] = _EMPTY
            if isinstance(r, ParDoRunner):
                r.receivers = {}  # finish_bundle of a wrapper yields nothing (else: abandoned)
                r.finish_bundle()
        outs: Dict[int, _Data] = {}
        for pc in self.materialized:  # fresh lists: the caller may change them
            d = data.get(pc, _EMPTY)
            outs[pc] = _Data(Columns([], [], []), []) if d is _EMPTY else d
        return outs


def _run_dofn(runner: Any, elements: Iterable[WindowedValue],
              outputs: Tuple[Tuple[Optional[str], int], ...]) -> Dict[int, List[WindowedValue]]:
    """A step through its ParDoRunner over a whole list: its outputs per PCollection, those of
    finish_bundle last."""
    captured: Dict[int, List[WindowedValue]] = {}
    receivers: Dict[Optional[str], List[Callable[[WindowedValue], None]]] = {}
    for tag, pc in outputs:
        lst = captured.setdefault(pc, [])
        receivers[tag] = [lst.append]
    runner.receivers = receivers
    runner.bind()
    process = runner.process
    for wv in elements:
        process(wv)
    runner.finish_bundle()
    return captured


#: The functions a plain chain may hold (`plain_steps`): what the Spark runner's vectorised
#: evaluation (`spark/fastpath`) can run over Arrow batches.
_PLAIN_KINDS = ("map", "maptuple", "flatmap", "filter")

def plain_steps(steps: Sequence[Any], root: int) -> Optional[List[Tuple[str, Any, str]]]:
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
            if not isinstance(dofn, _CallableWrapperDoFn) or dofn.kind not in _PLAIN_KINDS:
                return None
            if special_params(dofn.fn):
                return None
            out.append((dofn.kind, dofn.fn, spec.label))
        current = spec.outputs[0][1]
    return out
