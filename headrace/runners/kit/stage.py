"""Fused stages: a tree of element-wise steps as plain data (`StepSpec`) run bundle by bundle
with whole-bundle retries (`FusedStage`), the same in every runner's process or task."""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

from headrace.errors import DeadLetterThresholdError, ElementError, PipelineExecutionError, _short_repr
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model import coders
from headrace.model.window import WindowFn
from headrace.model.windowed import WindowedValue
from headrace.runners.kit import columnar
from headrace.runners.kit.columnar import Columns, StagePlan, _Data
from headrace.runners.kit.dofn_runner import AssignWindowsRunner, ParDoRunner, Receiver, start_bundle
from headrace.runners.kit.side_inputs import SideInputReader

_log = logging.getLogger(__name__)

#: The namespace of the element counts a counting stage adds to its metrics (`FusedStage.counts`):
#: counter `elements_in` at each step (the elements it read), `elements_out` (main output) or
#: `elements_out:TAG` at the step producing each output that leaves the stage.
ELEMENTS = "headrace.elements"

T = TypeVar("T")
_UNCOMPILED = object()


class StepSpec(NamedTuple):
    """One element-wise step of a fused stage, as plain data a runner can ship to its workers."""

    label: str
    input: int                                   # id of the input PCollection
    outputs: Tuple[Tuple[Optional[str], int], ...]  # (output tag, PCollection id)
    windowfn: Optional[WindowFn]                 # WindowInto: the new WindowFn (else None)
    dofn: Optional[bytes]                        # ParDo: the serialised DoFn (else None)
    args: tuple = ()
    kwargs: Optional[Dict[str, Any]] = None
    main_tag: Optional[str] = None
    dead_letter: Optional[Dict[str, Any]] = None
    drop_unknown_tags: bool = False              # with_outputs() without tags: Beam's dynamic tags


def step_spec(node: Any, pickled_dofn: Optional[bytes]) -> StepSpec:
    """The StepSpec of a ParDo or WindowInto application (`pickled_dofn` from `serialize_dofn`)."""
    t = node.transform
    outputs = tuple((tag, pc._id) for tag, pc in node.outputs.items())
    if pickled_dofn is None:  # WindowInto
        return StepSpec(node.full_label, node.inputs[0]._id, outputs, t.windowing.windowfn, None)
    return StepSpec(node.full_label, node.inputs[0]._id, outputs, None, pickled_dofn, tuple(t.args),
                    dict(t.kwargs), t.main_tag, t.dead_letter, t.dynamic_outputs)


def serialize_dofn(label: str, fn: Any) -> bytes:
    """The DoFn serialised for its workers, or an error saying how to make it serialisable."""
    try:
        return coders.dumps(fn)
    except Exception as exc:
        raise PipelineExecutionError(
            f"step {label!r}: its DoFn cannot be serialised ({type(exc).__name__}: {exc}); keep "
            "unpicklable objects such as connections out of the DoFn's constructor and create "
            "them in setup()", step=label) from exc


def _counted(process: Receiver, label: str, tally: Dict[str, int]) -> Receiver:
    """`process`, counting the elements it is given into `tally[label]` (`FusedStage.counts`)."""
    def counted(wv: WindowedValue) -> None:
        tally[label] += 1
        process(wv)
    return counted


def bundle_failure(err: ElementError, attempts: int) -> PipelineExecutionError:
    """The error of a bundle that failed in user code `attempts` times (the run stops)."""
    hint = f" {err.hint}." if err.hint else ""
    # a stateful DoFn's timer or expiry callback fails for a key (`kit.stateful`), not an element
    what = ("key " if err.phase.startswith(("timer", "@on_window")) else "element ") \
        + _short_repr(err.element)
    return PipelineExecutionError(
        f"step {err.step!r} failed in {err.phase} on {what} after {attempts} attempt(s) of its "
        f"bundle: {type(err.cause).__name__}: {err.cause}.{hint} Fix the step, or route failing "
        "elements to a dead-letter output with .with_exception_handling()",
        step=err.step, element=err.element, attempts=attempts)


def retried_bundle(label: str, max_attempts: int, committed: MetricsContainer,
                   attempted: MetricsContainer, attempt: Callable[[], T],
                   failed: Callable[[], None]) -> T:
    """Runs `attempt()` (one bundle of the step `label`, under a fresh metrics container) until
    it succeeds, at most `max_attempts` times: after an attempt failed in user code, `failed()`
    drops what it left (torn-down DoFns, state put back) before the next; the last failure
    stops the run (`bundle_failure`). A succeeded attempt's metrics are committed."""
    attempts = 0
    while True:
        attempts += 1
        container = MetricsContainer()
        try:
            with metrics_scope(container, label):
                result = attempt()
        except ElementError as err:
            attempted.merge(container)
            failed()
            if attempts >= max_attempts:
                raise bundle_failure(err, attempts) from err.cause
            _log.warning("bundle of step %r failed (attempt %d of %d); retrying: %s",
                         label, attempts, max_attempts, err.cause)
            continue
        attempted.merge(container)
        committed.merge(container)
        return result


class FusedStage:
    """A fused tree of element-wise steps run bundle by bundle, with whole-bundle retries.

    Every runner executes ParDo / WindowInto chains through this class (the local runner in
    its process, the Spark runner inside each task), so lifecycle, retries and metrics are
    the same everywhere. A bundle's outputs are returned only when the bundle succeeded; a
    failed attempt's outputs and metric updates (other than `attempted`) are discarded and
    the stage's DoFn instances torn down, so fused steps fail together (coupled failure).

    A bundle's first attempt runs breadth-first over lists (`kit.columnar.StagePlan`, compiled
    once per instance on the worker) when the stage has steps that qualify; if that run raises
    or meets anything unusual, its outputs are dropped, its metric updates count as attempted
    only, the DoFn instances are torn down, and the bundle runs element by element as if
    nothing had happened (the abandoned run is not one of its attempts).
    """

    def __init__(self, label: str, steps: Sequence[StepSpec], root: int,
                 materialized: Sequence[int], counts: bool = False) -> None:
        self.label = label
        #: whether each successful bundle adds the elements it read and wrote to its metrics
        #: (`ELEMENTS`; the run report's counts per edge, `--report`)
        self.counts = counts
        self.steps = tuple(steps)
        self.root = root
        self.materialized = tuple(materialized)
        self.runners: Optional[List[Any]] = None
        self._plan: Any = _UNCOMPILED
        #: The finalizers (DoFn.BundleFinalizerParam) of bundles that succeeded, waiting for
        #: the runner to commit them (`finalize_bundles`); kept only when the runner set
        #: `finalizes` (one that never calls `finalize_bundles` would let them pile up).
        self.pending_finalizers: List[Any] = []
        self.finalizes = False

    def __getstate__(self) -> Dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_plan", None)  # compiled on the worker, from the runners it builds
        return state

    def __setstate__(self, state: Dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("_plan", _UNCOMPILED)
        self.__dict__.setdefault("pending_finalizers", [])
        self.__dict__.setdefault("finalizes", False)
        self.__dict__.setdefault("counts", False)

    def _tally(self) -> Optional[Dict[str, int]]:
        """A fresh count of the elements each step reads in an attempt, when the stage counts."""
        return {s.label: 0 for s in self.steps} if self.counts else None

    def _count(self, container: MetricsContainer, tally: Optional[Dict[str, int]],
               written: Dict[int, Any]) -> None:
        """Adds a successful bundle's element counts (`ELEMENTS`) to `container`: what each
        step read, and what left the stage by each materialised output."""
        if tally is None:
            return
        for label, n in tally.items():
            container.update("counter", label, ELEMENTS, "elements_in", n)
        for s in self.steps:
            for tag, pc in s.outputs:
                if pc in written:
                    name = "elements_out" if tag is None or tag == s.main_tag else f"elements_out:{tag}"
                    container.update("counter", s.label, ELEMENTS, name, len(written[pc]))

    def _build(self) -> List[Any]:
        runners: List[Any] = []
        for s in self.steps:
            if s.windowfn is not None:
                runners.append(AssignWindowsRunner(s.label, s.windowfn))
            else:
                assert s.dofn is not None  # a step is a WindowInto or a ParDo
                runners.append(ParDoRunner.of(s))
        return runners

    def _wire(self, runners: List[Any], outs: Dict[int, List[WindowedValue]],
              tally: Optional[Dict[str, int]] = None) -> List[Receiver]:
        consumers_of: Dict[int, List[Tuple[str, Any]]] = {}
        for s, r in zip(self.steps, runners):
            consumers_of.setdefault(s.input, []).append((s.label, r))

        def entries(pc: int) -> List[Receiver]:   # read once bound (bind() may replace process)
            return [r.process if tally is None else _counted(r.process, label, tally)
                    for label, r in consumers_of.get(pc, [])]
        for s, r in reversed(list(zip(self.steps, runners))):  # consumers bind before producers
            rec: Dict[Optional[str], List[Any]] = {}
            for tag, pc in s.outputs:
                lst = entries(pc)
                if pc in outs:
                    lst.append(outs[pc].append)
                if isinstance(r, ParDoRunner) and tag is not None and tag == r.main_tag:
                    continue
                rec[tag] = lst
            r.receivers = rec
            r.bind()
        return entries(self.root)

    def process_bundle(self, bundle: Sequence[WindowedValue], side_inputs: Optional[SideInputReader],
                       max_attempts: int, committed: MetricsContainer,
                       attempted: MetricsContainer) -> Dict[int, List[WindowedValue]]:
        """Runs one bundle through every step (retrying it whole); returns outputs by PCollection id."""
        plan = self._columnar_plan()
        if plan is not None:
            elements = bundle if type(bundle) is list else list(bundle)
            outs = self._run_columnar(plan, _Data(None, elements), side_inputs, committed, attempted)
            if outs is not None:
                return {pc: d.elements() for pc, d in outs.items()}
        return self._process_elements(bundle, side_inputs, max_attempts, committed, attempted)

    def process_columns(self, bundle: Columns, side_inputs: Optional[SideInputReader],
                        max_attempts: int, committed: MetricsContainer,
                        attempted: MetricsContainer) -> Dict[int, Columns]:
        """`process_bundle` on a bundle of columns, returning columns (shared lists: never
        change them in place)."""
        plan = self._columnar_plan()
        if plan is not None:
            outs = self._run_columnar(plan, _Data(bundle, None), side_inputs, committed, attempted)
            if outs is not None:
                return {pc: d.columns() for pc, d in outs.items()}
        elements = self._process_elements(bundle.elements(), side_inputs, max_attempts, committed,
                                          attempted)
        return {pc: Columns.of_elements(lst) for pc, lst in elements.items()}

    def _columnar_plan(self) -> Optional[StagePlan]:
        if not columnar.COLUMNAR:
            return None
        if self._plan is _UNCOMPILED:
            if self.runners is None:
                self.runners = self._build()
            self._plan = StagePlan.compile(self.steps, self.root, self.materialized, self.runners)
        return self._plan  # type: ignore[no-any-return]

    def _run_columnar(self, plan: StagePlan, root: _Data, side_inputs: Optional[SideInputReader],
                      committed: MetricsContainer, attempted: MetricsContainer
                      ) -> Optional[Dict[int, _Data]]:
        """The columnar run of a bundle's first attempt, or None when it was abandoned."""
        container = MetricsContainer()
        try:
            with metrics_scope(container, self.label):
                if self.runners is None:
                    self.runners = self._build()
                tally = self._tally()
                outs = plan.run(self.runners, root, side_inputs, tally)
                self._count(container, tally, outs)
        except Exception as exc:
            attempted.merge(container)
            self.teardown()
            _log.debug("stage %r: columnar run abandoned (%s: %s); running the bundle element by "
                       "element", self.label, type(exc).__name__, exc)
            return None
        attempted.merge(container)
        committed.merge(container)
        self._succeeded()
        return outs

    def _succeeded(self) -> None:
        """Keeps the finalizers of the bundle that just succeeded until the runner commits it."""
        for r in self.runners or ():
            finalizer = getattr(r, "finalizer", None)
            if finalizer is not None and finalizer.has_callbacks():
                if self.finalizes:
                    self.pending_finalizers.append(finalizer)
                r.finalizer = None

    def finalize_bundles(self) -> None:
        """Runs the bundle-finalization callbacks of the bundles processed so far: a runner
        calls this once their outputs are committed (DoFn.BundleFinalizerParam)."""
        pending, self.pending_finalizers = self.pending_finalizers, []
        for finalizer in pending:
            finalizer.finalize_bundle()

    def _process_elements(self, bundle: Sequence[WindowedValue],
                          side_inputs: Optional[SideInputReader], max_attempts: int,
                          committed: MetricsContainer,
                          attempted: MetricsContainer) -> Dict[int, List[WindowedValue]]:
        """The per-element path: each element depth-first through the fused tree, with retries."""
        attempts = 0
        while True:
            attempts += 1
            container = MetricsContainer()
            outs: Dict[int, List[WindowedValue]] = {pc: [] for pc in self.materialized}
            try:
                if self.runners is None:
                    self.runners = self._build()
                runners = self.runners
                tally = self._tally()
                roots = self._wire(runners, outs, tally)
                with metrics_scope(container, self.label):
                    start_bundle(runners, side_inputs)
                    if len(roots) == 1:
                        proc = roots[0]
                        for wv in bundle:
                            proc(wv)
                    else:
                        for wv in bundle:
                            for proc in roots:
                                proc(wv)
                    for r in runners:
                        r.finish_bundle()
                self._count(container, tally, outs)
            except ElementError as err:
                attempted.merge(container)
                self.teardown()
                if isinstance(err.cause, DeadLetterThresholdError):  # a verdict, not a flaky failure
                    raise err.cause
                if attempts >= max_attempts:
                    raise bundle_failure(err, attempts) from err.cause
                _log.warning("bundle of %d elements failed in step %r (attempt %d of %d); retrying: %s",
                             len(bundle), err.step, attempts, max_attempts, err.cause)
                continue
            attempted.merge(container)
            committed.merge(container)
            self._succeeded()
            return outs

    def teardown(self) -> None:
        """Tears down every DoFn instance (a later bundle builds fresh ones)."""
        if self.runners is None:
            return
        with metrics_scope(None, self.label):
            for r in self.runners:
                r.teardown()
        self.runners = None
