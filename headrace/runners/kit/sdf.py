"""Splittable DoFns as every runner runs them: one expansion, one way to process a restriction.

A ParDo of a splittable DoFn (a `Kind.SPLITTABLE` unit) runs in three moves, whatever the
runner:

1. `SplittableProcessor.initial_works(element)`: pair the element with its initial restriction,
   split it (`RestrictionProvider.split_and_size`) and give each part, with its size and a new
   watermark-estimator state, as a `Work`.
2. The runner places the works (balanced by size, in Spark partitions or in a streaming state
   store) and processes each with `SplittableProcessor.process(work, now_us, split_policy)`: a
   tracker over the work's restriction, the DoFn's `process` claiming positions and outputting,
   the watermark estimator observing each output's timestamp.
3. What is left of a work comes back as residual `Work`s: the rest of a self-checkpoint
   (`defer_remainder(delay)`, resumed at `resume_at_us`) and the parts the runner split off
   (`SplitPolicy`: a budget reached, a straggler split, the local runner's test splits). The
   runner processes them later (a next wave, a next micro-batch, a timer), until none is left.

The step's output watermark is held by every work not yet finished: `Work.hold_us` is its
estimator's watermark (or the element's timestamp while the estimator has none), and a runner
takes the minimum over its live works and its input watermark (`output_watermark`).
Checks that name the step and the element: a position claimed out of order, output without a
successful claim, a restriction left unfinished without a checkpoint.

Outputs may come as `RecordBlock`s (a connector's buffer of lines or batch of records, all after
one claim): they stay blocks in a bundle's outputs, and a runner takes them as columns
(`output_columns`, no WindowedValue per record) or as elements (`expand_outputs`).
"""

from __future__ import annotations

import copy
import functools
import logging
import pickle
import random
import time
import zlib

import cloudpickle
from typing import (
    Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple,
)

from headrace.errors import ElementError, PipelineExecutionError, _short_repr
from headrace.io.iobase import BoundedSource, SourcePart, SourcePositions, UnboundedSourceReader
from headrace.metrics.metric import MetricsContainer, metrics_scope
from headrace.model.time import (
    MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Timestamp, set_processing_time, to_micros,
)
from headrace.model.window import GLOBAL_WINDOWS_TUPLE
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.pipeline.dofn import _RestrictionDoFnParam, _WatermarkEstimatorDoFnParam
from headrace.pipeline.splittable import (
    RecordBlock, RestrictionTracker, RestrictionTrackerView, WatermarkEstimator, deferred_until,
    signature,
)
from headrace.runners.kit.columnar import Columns
from headrace.runners.kit.dofn_runner import ParDoRunner
from headrace.runners.kit.sources import part_size, range_failure, split_source
from headrace.runners.kit.stage import StepSpec, retried_bundle, serialize_dofn, step_spec



class Work(NamedTuple):
    """One element with one restriction to process: what a runner places, stores and resumes."""

    element: WindowedValue
    restriction: Any
    estimator_state: Any
    #: Processing time (microseconds) before which it must not run (MIN: at once).
    resume_at_us: int
    #: Its watermark hold: no output for it will be earlier than this (microseconds).
    hold_us: int
    #: The restriction's size (`restriction_size`), for balancing.
    size: float


class Outcome(NamedTuple):
    """What processing one work left: residual works (none: the work is done), and the
    restriction it read (its primary: the tracker's restriction once the residuals were split off)."""

    residuals: List[Work]
    claimed: int
    primary: Any = None


class ReadRecord(NamedTuple):
    """What one work's processing read and left, for a replay of its bundle to read exactly
    that (`SplittableStep.run_bundle`'s `replay`): the work's element and restriction as they
    came (`digest`), the primary it read, and its residual works."""

    digest: int
    primary: Any
    residuals: List[Work]


def work_digest(work: Work) -> int:
    """A fingerprint of a work's element value and restriction (which work a ReadRecord is of;
    cloudpickle for what pickle cannot take, such as a source holding a lambda)."""
    value = (work.element.value, work.element.timestamp_us, work.restriction)
    try:
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    except Exception:
        data = cloudpickle.dumps(value, pickle.HIGHEST_PROTOCOL)
    return zlib.crc32(data)


class StragglerRule:
    """Dynamic rebalancing for runners whose workers cannot talk to each other (a wave of
    Spark tasks): a worker checkpoints the work it is processing once it would end far after
    its peers.

    The runner gives every worker of a wave the wave's total size `wave_size` (the sum of its
    works' `Work.size`), its `cores` and its start on the wall clock (`wave_started`, seconds
    since the epoch), and tells the worker the size of its own works (`assign`). The worker
    measures its own rate (size done per second since its first work; the done part of a work
    from its tracker's `current_progress`) and, once it has run `min_observed` seconds, asks
    for a checkpoint when at that rate it would end after `factor` times the time an even share
    (`wave_size / cores`) takes, counted from the wave's start, with at least `floor_seconds`
    of its own work left (a short rest is not worth a wave). The runner then re-splits what is
    left (`SplittableProcessor.split_work`) into `cores` parts for its next wave. A tracker
    without `current_progress` never fires the rule. One per worker task (`fired` tells
    whether it fired)."""

    #: Seconds between two looks at the progress (claims may come every microsecond).
    CHECK_EVERY = 0.05

    def __init__(self, wave_size: float, cores: int, wave_started: float, factor: float = 1.5,
                 floor_seconds: float = 1.0, min_observed: float = 0.25,
                 clock: Callable[[], float] = time.time) -> None:
        self.share = float(wave_size) / max(1, cores)
        self.wave_started = wave_started
        self.factor = factor
        self.floor_seconds = floor_seconds
        self.min_observed = min_observed
        self.clock = clock
        self.own = 0.0           # size of this worker's works
        self.task_started: Optional[float] = None
        self.done = 0.0          # size of the works finished by this worker
        self.current = 0.0       # size of the work being processed
        self.fired = False
        self.next_check = 0.0

    def assign(self, size: float) -> None:
        """This worker's works add up to `size` (more of them)."""
        self.own += size

    def start_work(self, size: float) -> None:
        """A work of `size` starts."""
        if self.task_started is None:
            self.task_started = self.clock()
        self.current = size

    def finish_work(self) -> None:
        """The current work ended (done, or checkpointed)."""
        self.done += self.current
        self.current = 0.0

    def straggling(self, tracker: RestrictionTracker) -> bool:
        """True when this worker lags (see the class doc): checkpoint now."""
        if self.task_started is None:
            return False
        now = self.clock()
        observed = now - self.task_started
        if observed < self.min_observed or now < self.next_check:
            return False
        self.next_check = now + self.CHECK_EVERY
        try:
            fraction = tracker.current_progress().fraction_completed
        except Exception:  # a tracker without progress: no rebalancing for it
            return False
        done = self.done + fraction * self.current
        if done <= 0:
            return False
        rate = done / observed
        left = max(0.0, self.own - done) / rate
        if left < self.floor_seconds:
            return False
        if now - self.wave_started + left > self.factor * self.share / rate:
            self.fired = True
            return True
        return False


class SplitPolicy:
    """When the runner splits a work while it is processed (asked after each successful claim).

    `max_claims` / `max_seconds`: a budget, after which the rest is checkpointed (a streaming
    micro-batch). `straggler`: a `StragglerRule` (a lagging worker checkpoints its work).
    `test_split_probability` with `seed`: after a claim, split the rest at a random fraction
    with that probability (a test that trackers tolerate splits)."""

    def __init__(self, max_claims: Optional[int] = None, max_seconds: Optional[float] = None,
                 test_split_probability: float = 0.0, seed: int = 0,
                 clock: Callable[[], float] = time.monotonic,
                 straggler: Optional[StragglerRule] = None) -> None:
        self.max_claims = max_claims
        self.max_seconds = max_seconds
        self.test_split_probability = test_split_probability
        self.random = random.Random(seed)
        self.clock = clock
        self.straggler = straggler

    def checkpoint_now(self, claims: int, started: float,
                       tracker: Optional[RestrictionTracker] = None) -> bool:
        """True when the budget is spent, or the worker straggles: checkpoint the rest."""
        if self.max_claims is not None and claims >= self.max_claims:
            return True
        if self.max_seconds is not None and self.clock() - started >= self.max_seconds:
            return True
        return (self.straggler is not None and tracker is not None
                and self.straggler.straggling(tracker))

    def test_split(self) -> Optional[float]:
        """A fraction of the remainder to split at now, or None."""
        if self.test_split_probability and self.random.random() < self.test_split_probability:
            return self.random.random() * 0.99
        return None


NO_SPLITS = SplitPolicy()
_LOG = logging.getLogger(__name__)


class _View(RestrictionTrackerView):
    """The tracker as `process` sees it; it records claims, checkpoints and the runner's splits."""

    def __init__(self, tracker: RestrictionTracker, policy: SplitPolicy, started: float) -> None:
        self.tracker = tracker
        self.policy = policy
        self.started = started
        self.claims = 0
        self.last_claim_ok = False
        self.deferred: Optional[Tuple[Any]] = None
        self.split_off: List[Any] = []   # residual restrictions the runner split off

    def current_restriction(self) -> Any:
        return self.tracker.current_restriction()

    def is_bounded(self) -> bool:
        return self.tracker.is_bounded()

    def try_claim(self, position: Any) -> bool:
        if self.claims and self.policy.checkpoint_now(self.claims, self.started, self.tracker):
            self._split(0.0)
        ok = self.tracker.try_claim(position)
        self.last_claim_ok = ok
        if ok:
            self.claims += 1
            fraction = self.policy.test_split()
            if fraction is not None:
                self._split(fraction)
        return ok

    def _split(self, fraction: float) -> None:
        parts = self.tracker.try_split(fraction)
        if parts is not None:
            self.split_off.append(parts[1])

    def defer_remainder(self, deferred_time: Any = None) -> None:
        self.deferred = (deferred_time,)


class SplittableProcessor:
    """One splittable step in a worker: a ParDoRunner whose `process` gets a tracker view and a
    watermark estimator, with outputs checked against claims (see the module doc)."""

    def __init__(self, pardo: ParDoRunner,
                 receivers: Mapping[Optional[str], Sequence[Callable[[WindowedValue], None]]]) -> None:
        self.pardo = pardo
        self.label = pardo.label
        self.sig = signature(pardo.label, pardo.dofn)
        self._view: Optional[_View] = None
        self._estimator: Optional[WatermarkEstimator] = None
        self._observer: Optional[WatermarkEstimator] = None  # the estimator, if it observes outputs
        pardo.receivers = {tag: [self._guard(r) for r in rs] for tag, rs in receivers.items()}
        pardo.sdf_param = self._param
        pardo.bind()

    # ---- lifecycle (the ParDoRunner's) -----------------------------------------------

    def setup(self) -> None:
        """The DoFn's setup."""
        self.pardo.setup()

    def start_bundle(self) -> None:
        """The DoFn's start_bundle (and a fresh bundle finalizer)."""
        self.pardo.start_bundle()

    def finish_bundle(self) -> None:
        """The DoFn's finish_bundle."""
        self.pardo.finish_bundle()

    def teardown(self) -> None:
        """The DoFn's teardown."""
        self.pardo.teardown()

    def finalize_bundle(self) -> None:
        """Runs the bundle finalizer's callbacks (call once the bundle's outputs are committed)."""
        if self.pardo.finalizer is not None:
            self.pardo.finalizer.finalize_bundle()

    # ---- the expansion ---------------------------------------------------------------

    def _provider_call(self, what: str, element: Any, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except ElementError:
            raise
        except Exception as exc:
            raise ElementError(self.label, element, exc, what) from exc

    def initial_works(self, wv: WindowedValue) -> List[Work]:
        """The element's initial restriction, split and sized, as works to process; an element
        in several windows is one element per window (each window's work is claimed apart)."""
        if len(wv.windows) > 1:
            return [w for window in wv.windows for w in self.initial_works(
                WindowedValue(wv.value, wv.timestamp_us, (window,), wv.pane_info, wv.is_retraction))]
        provider, value = self.sig.restriction_provider, wv.value
        restriction = self._provider_call(
            "initial_restriction", value, lambda: provider.initial_restriction(value))
        parts = self._provider_call(
            "split_and_size", value, lambda: list(provider.split_and_size(value, restriction)))
        works = []
        for part, size in parts:
            state = self._initial_state(value, part)
            works.append(Work(wv, part, state, MIN_TIMESTAMP_MICROS,
                              self._hold(wv, self._estimator_of(value, state)), float(size)))
        return works

    def _initial_state(self, value: Any, restriction: Any) -> Any:
        est = self.sig.estimator_provider
        if est is None:
            return None
        return self._provider_call("initial_estimator_state", value,
                                   lambda: est.initial_estimator_state(value, restriction))

    def _estimator_of(self, value: Any, state: Any) -> Optional[WatermarkEstimator]:
        est = self.sig.estimator_provider
        if est is None:
            return None
        return self._provider_call("create_watermark_estimator", value,
                                   lambda: est.create_watermark_estimator(state))

    @staticmethod
    def _hold(wv: WindowedValue, estimator: Optional[WatermarkEstimator]) -> int:
        wm = estimator.current_watermark() if estimator is not None else None
        return wv.timestamp_us if wm is None else to_micros(wm)

    def size(self, work: Work, restriction: Any) -> float:
        """`restriction_size` of a restriction of the work's element."""
        value = work.element.value
        return float(self._provider_call(
            "restriction_size", value,
            lambda: self.sig.restriction_provider.restriction_size(value, restriction)))

    def process(self, work: Work, now_us: int, policy: SplitPolicy = NO_SPLITS) -> Outcome:
        """Processes one work at processing time `now_us`; returns its residuals."""
        value = work.element.value
        tracker = self._provider_call(
            "create_tracker", value, lambda: self.sig.restriction_provider.create_tracker(work.restriction))
        # a copy: an estimator that changes its state in place must not change the work's, which
        # a retry of the bundle processes again
        estimator = self._estimator_of(value, copy.deepcopy(work.estimator_state))
        view = _View(tracker, policy, time.monotonic())
        # an estimator that ignores outputs' timestamps (the base class's no-op: a manual one)
        # is not shown them, so a RecordBlock of Arrow columns is never turned into records
        observes = estimator is not None and \
            type(estimator).observe_timestamp is not WatermarkEstimator.observe_timestamp
        self._view, self._estimator = view, estimator
        self._observer = estimator if observes else None
        before = set_processing_time(now_us)
        if policy.straggler is not None:
            policy.straggler.start_work(work.size)
        try:
            self.pardo.process(work.element)
        finally:
            set_processing_time(before)
            self._view = self._estimator = self._observer = None
            if policy.straggler is not None:
                policy.straggler.finish_work()
        residuals = self._residuals(work, tracker, estimator, view, now_us)
        return Outcome(residuals, view.claims, tracker.current_restriction())

    def _residuals(self, work: Work, tracker: RestrictionTracker,
                   estimator: Optional[WatermarkEstimator], view: _View, now_us: int) -> List[Work]:
        value = work.element.value
        state = estimator.get_estimator_state() if estimator is not None else None
        hold = self._hold(work.element, estimator)
        out = [Work(work.element, r, state, MIN_TIMESTAMP_MICROS, hold, self.size(work, r))
               for r in view.split_off]
        if view.deferred is not None:
            parts = self._provider_call("try_split", value, lambda: tracker.try_split(0))
            if parts is not None:
                resume = deferred_until(Timestamp(micros=now_us), view.deferred[0])
                out.append(Work(work.element, parts[1], state, resume.micros, hold,
                                self.size(work, parts[1])))
        try:
            tracker.check_done()
        except Exception as exc:
            raise ElementError(self.label, value, exc, "process (check_done)") from exc
        return out

    def split_work(self, work: Work, parts: int) -> List[Work]:
        """`work` cut into about `parts` works of near-equal size (a fresh tracker over its
        restriction, split before any claim at 1/parts, 1/(parts-1), ... of what is left); the
        work itself when its tracker will not split."""
        value = work.element.value
        provider = self.sig.restriction_provider
        out: List[Work] = []
        rest = work.restriction
        for k in range(max(1, parts), 1, -1):
            cut = self._provider_call("try_split", value,
                                      functools.partial(_cut, provider, rest, 1.0 / k))
            if cut is None:
                break
            out.append(work._replace(restriction=cut[0], size=self.size(work, cut[0])))
            rest = cut[1]
        out.append(work._replace(restriction=rest, size=self.size(work, rest)))
        return out

    # ---- inside process ----------------------------------------------------------------

    def _param(self, p: Any) -> Any:
        if isinstance(p, _RestrictionDoFnParam):
            return self._view
        if isinstance(p, _WatermarkEstimatorDoFnParam):
            return self._estimator
        return None

    def _guard(self, receiver: Callable[[WindowedValue], None]) -> Callable[[WindowedValue], None]:
        label = self.label

        def checked(wv: WindowedValue) -> None:
            view = self._view
            if view is not None:
                if not view.last_claim_ok:
                    raise PipelineExecutionError(
                        f"step {label!r}: output {_short_repr(wv.value)} without a successful "
                        "tracker.try_claim(position) before it; claim the position an output "
                        "comes from, and output nothing once a claim failed", step=label)
                if self._observer is not None:
                    _observe(self._observer, wv)
            receiver(wv)
        return checked


def _observe(estimator: WatermarkEstimator, wv: WindowedValue) -> None:
    """The estimator observes an output's timestamp (each record's, for a RecordBlock)."""
    block = wv.value
    if type(block) is not RecordBlock:
        estimator.observe_timestamp(Timestamp(micros=wv.timestamp_us))
        return
    own = [r.timestamp_us for r in block.values if type(r) is TimestampedValue]
    if len(own) < len(block.values):
        own.append(wv.timestamp_us)
    for ts in own:
        estimator.observe_timestamp(Timestamp(micros=ts))


def expand_outputs(outputs: Sequence[WindowedValue]) -> List[WindowedValue]:
    """A bundle's outputs with every RecordBlock replaced by its records, as elements."""
    if not any(type(wv.value) is RecordBlock for wv in outputs):
        return list(outputs)
    out: List[WindowedValue] = []
    for cols in output_columns(outputs):
        out.extend(cols.elements())
    return out


def output_records(outputs: Dict[int, List[WindowedValue]]) -> int:
    """How many records a bundle's outputs (by PCollection id) carry: a RecordBlock counts its
    records, any other output one."""
    return sum(len(wv.value) if type(wv.value) is RecordBlock else 1
               for lst in outputs.values() for wv in lst)


def output_columns(outputs: Sequence[WindowedValue]) -> Iterable[Columns]:
    """A bundle's outputs as columns: one per RecordBlock, one per run of plain elements."""
    run: List[WindowedValue] = []
    for wv in outputs:
        block = wv.value
        if type(block) is not RecordBlock:
            run.append(wv)
            continue
        if run:
            yield Columns.of_elements(run)
            run = []
        if block.values:
            yield Columns.of_records(block.values, wv)
    if run:
        yield Columns.of_elements(run)


def _cut(provider: Any, restriction: Any, fraction: float) -> Optional[Tuple[Any, Any]]:
    """A fresh tracker of `restriction` split at `fraction` before any claim."""
    tracker: RestrictionTracker = provider.create_tracker(restriction)
    return tracker.try_split(fraction)


def output_watermark(input_watermark_us: int, holds: Iterable[int]) -> int:
    """A splittable step's output watermark: its input's, held by every live work's hold."""
    return min([input_watermark_us, *holds])


class SplittableSpec(NamedTuple):
    """A splittable ParDo as plain data a runner can ship to its workers."""

    step: StepSpec
    #: True when one element's work may never end (`@DoFn.unbounded_per_element()`).
    unbounded_per_element: bool

    @staticmethod
    def of(node: Any) -> "SplittableSpec":
        """The spec of a splittable ParDo application."""
        label = node.full_label
        fn = node.transform.fn
        return SplittableSpec(step_spec(node, serialize_dofn(label, fn)),
                              signature(label, fn).unbounded_per_element)

    @property
    def label(self) -> str:
        """The step's full label."""
        return self.step.label


class BundleResult(NamedTuple):
    """What one committed bundle of a splittable step produced."""

    outputs: Dict[int, List[WindowedValue]]   # by PCollection id
    residuals: List[Work]
    claims: int
    #: each work's ReadRecord, in the order of the works
    reads: List[ReadRecord] = []


class SplittableStep:
    """A splittable step where it runs: its processor (built on first use), its outputs by
    PCollection id, and bundles run with whole-bundle retries: a failed attempt's outputs,
    residuals and metric updates are dropped, its finalizer's callbacks never run, its DoFn is
    torn down, and the same works are processed again (works are immutable, so a retry is exact)."""

    def __init__(self, spec: SplittableSpec) -> None:
        self.spec = spec
        self.label = spec.label
        self.outs: Dict[int, List[WindowedValue]] = {pc: [] for _, pc in spec.step.outputs}
        self._processor: Optional[SplittableProcessor] = None

    def processor(self) -> SplittableProcessor:
        """The processor (its DoFn built, wired and set up on first use)."""
        proc = self._processor
        if proc is None:
            receivers: Dict[Optional[str], List[Callable[[WindowedValue], None]]] = {}
            for tag, pc in self.spec.step.outputs:
                receivers.setdefault(tag, []).append(self.outs[pc].append)
            proc = self._processor = SplittableProcessor(ParDoRunner.of(self.spec.step), receivers)
            with metrics_scope(None, self.label):
                proc.setup()
        return proc

    def initial_works(self, elements: Iterable[WindowedValue]) -> List[Work]:
        """The works of new input elements (initial restrictions, split and sized)."""
        proc = self.processor()
        works: List[Work] = []
        with metrics_scope(None, self.label):
            for wv in elements:
                works.extend(proc.initial_works(wv))
        return works

    def run_bundle(self, works: Sequence[Work], now_us: int, policy: SplitPolicy,
                   max_attempts: int, committed: MetricsContainer, attempted: MetricsContainer,
                   finalize: bool = True, blocks: bool = False,
                   replay: Optional[Sequence[ReadRecord]] = None,
                   journal: bool = False) -> BundleResult:
        """Processes `works` as one bundle (start_bundle, each work, finish_bundle), retried whole
        up to `max_attempts`; returns its outputs, residuals and what each work read. With
        `finalize`, the bundle finalizer's callbacks run at once (for a runner whose hand-over of
        the outputs is their commit); otherwise the caller calls `finalize_bundle()` once it has
        committed them. With `blocks`, outputs keep their RecordBlocks (for `output_columns`);
        otherwise they are expanded into elements. With `replay` (the `reads` of an earlier run
        of the same works, whose outputs may have been committed), each work reads exactly the
        primary it read then, with no split, and leaves the residuals it left then. The result's
        `reads` are filled only with `journal` or `replay`."""
        if replay is not None and [r.digest for r in replay] != [work_digest(w) for w in works]:
            # not the same works (the bundle's input changed: an upstream read that is not
            # replayed exactly): read them afresh, and say that this batch may differ
            _LOG.warning("step %r: a replayed bundle has other works than its first run; they "
                         "are read afresh, so this batch's outputs may differ from the first "
                         "run's", self.label)
            replay = None

        def attempt() -> BundleResult:
            for lst in self.outs.values():
                lst.clear()
            residuals: List[Work] = []
            reads: List[ReadRecord] = []
            claims = 0
            proc = self.processor()
            proc.start_bundle()
            for i, work in enumerate(works):
                if replay is not None:
                    outcome = self._replay(proc, work, replay[i], now_us)
                else:
                    outcome = proc.process(work, now_us, policy)
                    if journal:
                        reads.append(ReadRecord(work_digest(work), outcome.primary, outcome.residuals))
                residuals.extend(outcome.residuals)
                claims += outcome.claimed
            proc.finish_bundle()
            keep = list if blocks else expand_outputs
            return BundleResult({pc: keep(lst) for pc, lst in self.outs.items()}, residuals, claims,
                                list(replay) if replay is not None else reads)

        result = retried_bundle(self.label, max_attempts, committed, attempted, attempt,
                                self.teardown)
        if finalize:
            self.finalize_bundle()
        return result

    def _replay(self, proc: "SplittableProcessor", work: Work, read: ReadRecord, now_us: int) -> Outcome:
        """`work` read again over the primary its first run read, leaving that run's residuals;
        a read that stops short of the primary (the source no longer has what it read) fails."""
        outcome = proc.process(work._replace(restriction=read.primary), now_us, NO_SPLITS)
        if outcome.primary != read.primary:   # it checkpointed before the primary's end
            raise PipelineExecutionError(
                f"step {self.label!r} could not read again what a micro-batch read before a "
                f"failure ({read.primary!r} of element {work.element.value!r}): its source no "
                "longer has those records (trimmed or expired?), so the replayed batch would "
                "differ from the one whose outputs may be committed. Keep the source's records "
                "longer than a batch may take to be retried (e.g. a stream's MAXLEN, a topic's "
                "retention)", step=self.label)
        return Outcome(read.residuals, outcome.claimed, read.primary)

    def split_work(self, work: Work, parts: int) -> List[Work]:
        """`work` cut into about `parts` works of near-equal size (`SplittableProcessor.split_work`)."""
        with metrics_scope(None, self.label):
            return self.processor().split_work(work, parts)

    def take_finalizer(self) -> Optional[Any]:
        """The last committed bundle's finalizer (its `finalize_bundle()` runs the callbacks),
        for a runner that commits several bundles' outputs at once; None when it has none."""
        proc = self._processor
        if proc is None or proc.pardo.finalizer is None:
            return None
        finalizer, proc.pardo.finalizer = proc.pardo.finalizer, None
        return finalizer

    def finalize_bundle(self) -> None:
        """Runs the last committed bundle's finalizer callbacks."""
        if self._processor is not None:
            with metrics_scope(None, self.label):
                self._processor.finalize_bundle()

    def teardown(self) -> None:
        """Tears the DoFn down (the next bundle builds a fresh one)."""
        proc, self._processor = self._processor, None
        if proc is not None:
            with metrics_scope(None, self.label):
                proc.teardown()


def next_resume(works: Iterable[Work]) -> int:
    """The earliest processing time at which one of `works` may run (MAX when none)."""
    return min((w.resume_at_us for w in works), default=MAX_TIMESTAMP_MICROS)


# ---- Read as a splittable DoFn ----------------------------------------------------------------


def source_element(source: Any) -> WindowedValue:
    """The one element a Read's wrapper processes: the source, at the start of time."""
    return WindowedValue(source, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)


def read_spec(node: Any, reader: Any) -> SplittableSpec:
    """The spec of a Read step run as the splittable DoFn `reader` (a BoundedSourceReader or an
    UnboundedSourceReader of `io.iobase`) over its source."""
    outputs = tuple((tag, pc._id) for tag, pc in node.outputs.items())
    return _reader_spec(node.full_label, outputs, reader)


def _reader_spec(label: str, outputs: Tuple[Tuple[Optional[str], int], ...], reader: Any
                 ) -> SplittableSpec:
    step = StepSpec(label, -1, outputs, None, serialize_dofn(label, reader), (), {}, None, None)
    return SplittableSpec(step, isinstance(reader, UnboundedSourceReader))


def read_positions(label: str, source: Any, start: Any, stop: Any) -> List[WindowedValue]:
    """The records of an UnboundedSource between two positions a runner chose (the Spark
    streaming runner's micro-batch ranges), read by the splittable DoFn `UnboundedSourceReader`
    over the restriction `SourcePositions(start, stop)`: its outputs, as RecordBlocks
    (`expand_outputs`, `output_columns`); an error names the step."""
    step = SplittableStep(_reader_spec(label, ((None, 0),), UnboundedSourceReader()))
    work = Work(source_element(source), SourcePositions(start, stop), None, MIN_TIMESTAMP_MICROS,
                MIN_TIMESTAMP_MICROS, 1.0)
    try:
        result = step.run_bundle([work], Timestamp.now().micros, NO_SPLITS, 1, MetricsContainer(),
                                 MetricsContainer(), blocks=True)
    except PipelineExecutionError as exc:
        cause = exc.__cause__ if exc.__cause__ is not None else exc
        raise range_failure(label, start, stop, cause) from cause
    finally:
        step.teardown()
    return result.outputs[0]


def read_works(label: str, source: Any, parallelism: int, step: SplittableStep) -> List[Work]:
    """The initial works of a Read: a bounded source's parts (`kit.sources.split_source`, whose
    errors name the step), or an unbounded source's one restriction."""
    element = source_element(source)
    if isinstance(source, BoundedSource):
        # each part's size (a file source's bytes): the runners spread the parts by it
        return [Work(element, SourcePart(part), None, MIN_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS,
                     part_size(label, source, part))
                for part in split_source(label, source, parallelism)]
    return step.initial_works([element])
