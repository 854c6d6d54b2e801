"""Splittable DoFn: the user-facing abstractions, under Beam's names and signatures.

A splittable DoFn (SDF) processes one element in pieces. Its `process` takes
`tracker=DoFn.RestrictionParam(provider)`: a `RestrictionProvider` gives each element an initial
restriction (e.g. an `OffsetRange` of a file's bytes), splits it into parts a runner can read in
parallel and sizes them; for each part the runner creates a `RestrictionTracker` and calls
`process`, which claims positions one by one (`tracker.try_claim(position)`) and outputs only
what it has claimed. Either side may cut the rest off: the DoFn by checkpointing
(`tracker.defer_remainder(delay)`, or by returning once a claim failed), the runner by
`try_split(fraction_of_remainder)` (to rebalance work, or to end a streaming micro-batch); the
part cut off (the residual) is processed later, possibly elsewhere. An SDF may also take
`DoFn.WatermarkEstimatorParam(provider)` to report the event time of what it has yet to output
(the step's output watermark is held back by it), and be decorated `@DoFn.unbounded_per_element()`
when one element's work never ends (a queue, a growing file). See the Splittable DoFn blog post
(https://beam.apache.org/blog/splittable-do-fn/) and docs/architecture.md for how runners run it.

The io modules and the runner kit (`runners/kit/sdf.py`) build on this module.
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, NamedTuple, Optional, Tuple

from headrace.errors import PipelineConstructionError
from headrace.model.time import Duration, Timestamp


class RestrictionProgress:
    """How much of a restriction is done and how much is left, in the tracker's own units.

    Give `completed` and `remaining` (work units, e.g. bytes), or `fraction` (of the whole done),
    as Beam's `RestrictionProgress(completed=, remaining=, fraction=)`."""

    def __init__(self, completed: Optional[float] = None, remaining: Optional[float] = None,
                 fraction: Optional[float] = None) -> None:
        self._completed = completed
        self._remaining = remaining
        self._fraction = fraction

    @property
    def completed_work(self) -> float:
        """The work done (given, or derived from `remaining` and `fraction`, or the fraction)."""
        if self._completed is not None:
            return self._completed
        if self._remaining is not None and self._fraction is not None and self._fraction < 1:
            return self._remaining * self._fraction / (1 - self._fraction)
        return float(self._fraction or 0.0)

    @property
    def remaining_work(self) -> float:
        """The work left (given, or derived from `completed` and `fraction`, or 1 - fraction)."""
        if self._remaining is not None:
            return self._remaining
        if self._completed is not None and self._fraction:
            return self._completed * (1 - self._fraction) / self._fraction
        return 1.0 - float(self._fraction or 0.0)

    @property
    def total_work(self) -> float:
        """Done plus left."""
        return self.completed_work + self.remaining_work

    @property
    def fraction_completed(self) -> float:
        """The fraction of the work done, in [0, 1] (1 when there is no work)."""
        if self._fraction is not None:
            return self._fraction
        total = self.total_work
        return self.completed_work / total if total else 1.0

    @property
    def fraction_remaining(self) -> float:
        """The fraction of the work left, in [0, 1] (0 when there is no work)."""
        if self._fraction is not None:
            return 1 - self._fraction
        total = self.total_work
        return self.remaining_work / total if total else 0.0

    def with_completed(self, completed: float) -> "RestrictionProgress":
        """A copy with `completed` as the work done (the fraction and remaining work kept)."""
        return RestrictionProgress(completed=completed, remaining=self._remaining,
                                   fraction=self._fraction)

    def __repr__(self) -> str:
        return (f"RestrictionProgress(fraction={self._fraction!r}, completed={self._completed!r}, "
                f"remaining={self._remaining!r})")


class RestrictionTracker:
    """Tracks the claimed positions of one restriction while an SDF processes it (Beam's API).

    A subclass implements `current_restriction`, `try_claim`, `try_split`, `check_done`,
    `is_bounded` and, for progress-based splitting and sizing, `current_progress`. A runner may
    call `try_split` while `process` is claiming (from another thread, or between claims), so
    the two must agree: after a split, claims beyond the primary fail."""

    def current_restriction(self) -> Any:
        """The restriction as it is now (shrunk by splits)."""
        raise NotImplementedError(f"{type(self).__name__} must implement current_restriction()")

    def current_progress(self) -> RestrictionProgress:
        """The work done and left (used to size residuals and balance work)."""
        raise NotImplementedError(f"{type(self).__name__} must implement current_progress()")

    def try_claim(self, position: Any) -> bool:
        """Claims `position`: True when it is within the restriction (then the DoFn may output
        for it), False when it is past the end (then the DoFn must return at once)."""
        raise NotImplementedError(f"{type(self).__name__} must implement try_claim(position)")

    def try_split(self, fraction_of_remainder: float) -> Optional[Tuple[Any, Any]]:
        """Splits the unclaimed remainder at about `fraction_of_remainder` of it: returns
        (primary, residual), the primary kept by this tracker and the residual processed
        later, together exactly the current restriction; or None when it cannot split. A
        fraction of 0 is a checkpoint: the primary ends right after the last claimed position."""
        raise NotImplementedError(f"{type(self).__name__} must implement try_split(fraction)")

    def check_done(self) -> None:
        """Raises (naming what is left) unless every position of the restriction was claimed or
        a claim past its end failed."""
        raise NotImplementedError(f"{type(self).__name__} must implement check_done()")

    def is_bounded(self) -> bool:
        """Whether the restriction has an end (False for a growing one)."""
        raise NotImplementedError(f"{type(self).__name__} must implement is_bounded()")


class RestrictionTrackerView:
    """What `process` receives as `tracker=DoFn.RestrictionParam(...)`: the tracker's claim
    side, and `defer_remainder` to checkpoint (as Beam's view)."""

    def current_restriction(self) -> Any:
        """The restriction as it is now."""
        raise NotImplementedError

    def try_claim(self, position: Any) -> bool:
        """Claims `position` (see `RestrictionTracker.try_claim`)."""
        raise NotImplementedError

    def defer_remainder(self, deferred_time: Any = None) -> None:
        """Checkpoints: the unclaimed rest is processed again later, `deferred_time` from now (a
        Duration or seconds) or at that processing time (a Timestamp); None: as soon as the
        runner likes. `process` should return right after calling it."""
        raise NotImplementedError

    def is_bounded(self) -> bool:
        """Whether the restriction has an end."""
        raise NotImplementedError


class RestrictionProvider:
    """Creates, splits and sizes the restrictions of a splittable DoFn's elements (Beam's API).

    Implement `initial_restriction`, `create_tracker` and `restriction_size`; `split`,
    `split_and_size`, `truncate` and `restriction_coder` have defaults. A DoFn may be its own
    provider: it subclasses both and asks for `DoFn.RestrictionParam()` with no argument."""

    def initial_restriction(self, element: Any) -> Any:
        """The restriction covering all of `element`'s work."""
        raise NotImplementedError(f"{type(self).__name__} must implement initial_restriction(element)")

    def create_tracker(self, restriction: Any) -> RestrictionTracker:
        """A new tracker over `restriction`."""
        raise NotImplementedError(f"{type(self).__name__} must implement create_tracker(restriction)")

    def split(self, element: Any, restriction: Any) -> Iterable[Any]:
        """Parts of the initial restriction to read in parallel (default: the whole)."""
        yield restriction

    def restriction_size(self, element: Any, restriction: Any) -> float:
        """The size of a restriction's work (e.g. bytes), used to balance parts."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement restriction_size(element, restriction)")

    def split_and_size(self, element: Any, restriction: Any) -> Iterable[Tuple[Any, float]]:
        """`split`'s parts, each with its `restriction_size`."""
        for part in self.split(element, restriction):
            yield part, self.restriction_size(element, part)

    def restriction_coder(self) -> Any:
        """The coder of restrictions (headrace stores them pickled: any picklable value works)."""
        from headrace.model.element_coders import PickleCoder
        return PickleCoder()

    def truncate(self, element: Any, restriction: Any) -> Optional[Any]:
        """The part of `restriction` still to process when a pipeline drains: the whole of a
        bounded one, nothing (None) of an unbounded one."""
        if self.create_tracker(restriction).is_bounded():
            return restriction
        return None


class WatermarkEstimator:
    """Estimates the event time of what an SDF has yet to output for one restriction (Beam's API).

    Its state (`get_estimator_state`) travels with a residual, so that the estimator resumes
    where it stopped."""

    def get_estimator_state(self) -> Any:
        """The state to resume from (picklable)."""
        raise NotImplementedError(f"{type(self).__name__} must implement get_estimator_state()")

    def current_watermark(self) -> Optional[Timestamp]:
        """No later output will be earlier than this; None: nothing known yet."""
        raise NotImplementedError(f"{type(self).__name__} must implement current_watermark()")

    def observe_timestamp(self, timestamp: Timestamp) -> None:
        """Called with each output's timestamp."""


class WatermarkEstimatorProvider:
    """Creates an SDF's watermark estimators and their initial states (Beam's API)."""

    def initial_estimator_state(self, element: Any, restriction: Any) -> Any:
        """The state of a new restriction's estimator."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement initial_estimator_state(element, restriction)")

    def create_watermark_estimator(self, estimator_state: Any) -> WatermarkEstimator:
        """An estimator resuming from `estimator_state`."""
        raise NotImplementedError(
            f"{type(self).__name__} must implement create_watermark_estimator(estimator_state)")

    def estimator_state_coder(self) -> Any:
        """The coder of estimator states (headrace stores them pickled: any picklable value)."""
        from headrace.model.element_coders import PickleCoder
        return PickleCoder()


def deferred_until(now: Timestamp, deferred_time: Any) -> Timestamp:
    """The processing time a checkpoint asked to resume at: `now` plus a Duration (or seconds),
    a Timestamp as is, `now` for None."""
    if deferred_time is None:
        return now
    if isinstance(deferred_time, Timestamp):
        return deferred_time
    return now + Duration.of(deferred_time)


class RecordBlock:
    """Several outputs of a splittable DoFn's `process` at once (headrace's own connectors yield
    them: a file's lines of one claimed buffer, a source's batch of records).

    Yielding `RecordBlock(values)` means exactly yielding each value in turn after the same
    claim: a plain value takes the element's timestamp and windows, a TimestampedValue its own
    timestamp. A runner may hand the values on as one column rather than one by one, which is
    why the connectors use it; a DoFn that is not splittable must not yield it.
    `RecordBlock.of_arrow(batch, records_of, row_attributes)` is an Arrow record batch whose
    values are `records_of(batch)` (dicts, or `Row`s when `row_attributes`): a runner that can
    work on the columns themselves never builds them."""

    __slots__ = ("_values", "arrow", "_records_of", "row_attributes")

    def __init__(self, values: Optional[list] = None, arrow: Any = None,
                 records_of: Optional[Callable[[Any], Iterable[Any]]] = None,
                 row_attributes: bool = False) -> None:
        self._values = values
        self.arrow = arrow
        self._records_of = records_of
        self.row_attributes = row_attributes

    @staticmethod
    def of_arrow(batch: Any, records_of: Callable[[Any], Iterable[Any]],
                 row_attributes: bool = False) -> "RecordBlock":
        """An Arrow record batch as a block whose values are `records_of(batch)`."""
        return RecordBlock(None, batch, records_of, row_attributes)

    @property
    def values(self) -> list:
        """The block's values (made from the Arrow batch on first use)."""
        if self._values is None:
            assert self._records_of is not None
            self._values = list(self._records_of(self.arrow))
        return self._values

    def __len__(self) -> int:
        return len(self._values) if self._values is not None else int(self.arrow.num_rows)

    def __reduce__(self) -> Any:
        return RecordBlock, (self.values,)

    def __repr__(self) -> str:
        return f"RecordBlock(<{len(self)} values>)"


class Signature(NamedTuple):
    """What a splittable DoFn declares: its providers and whether one element's work may be endless."""

    restriction_provider: RestrictionProvider
    estimator_provider: Optional[WatermarkEstimatorProvider]
    unbounded_per_element: bool


def signature(label: str, dofn: Any) -> Signature:
    """The splittable DoFn's providers; a construction error names the step when one is missing."""
    from headrace.pipeline.dofn import _RestrictionDoFnParam, _WatermarkEstimatorDoFnParam
    classes = (_RestrictionDoFnParam, _WatermarkEstimatorDoFnParam)
    params = {n: (p.default() if any(p.default is c for c in classes) else p.default)
              for n, p in inspect.signature(dofn.process).parameters.items()}
    restriction = [p for p in params.values() if isinstance(p, _RestrictionDoFnParam)]
    if not restriction:
        raise PipelineConstructionError(
            f"step {label!r}: {type(dofn).__name__}.process takes no DoFn.RestrictionParam; it is "
            "not a splittable DoFn")
    provider = restriction[0].restriction_provider
    if provider is None:
        if not isinstance(dofn, RestrictionProvider):
            raise PipelineConstructionError(
                f"step {label!r}: {type(dofn).__name__} asks for DoFn.RestrictionParam() without a "
                "provider, so it must be its own RestrictionProvider; subclass both (class "
                f"{type(dofn).__name__}(beam.DoFn, RestrictionProvider)) or pass one: "
                "DoFn.RestrictionParam(MyProvider())")
        provider = dofn
    estimators = [p for p in params.values() if isinstance(p, _WatermarkEstimatorDoFnParam)]
    estimator: Optional[WatermarkEstimatorProvider] = None
    if estimators:
        estimator = estimators[0].watermark_estimator_provider
        if estimator is None:
            if not isinstance(dofn, WatermarkEstimatorProvider):
                raise PipelineConstructionError(
                    f"step {label!r}: {type(dofn).__name__} asks for "
                    "DoFn.WatermarkEstimatorParam() without a provider, so it must be its own "
                    "WatermarkEstimatorProvider; subclass it or pass one, e.g. "
                    "DoFn.WatermarkEstimatorParam(ManualWatermarkEstimator.default_provider())")
            estimator = dofn
    unbounded = bool(getattr(dofn.process, "unbounded_per_element", False))
    return Signature(provider, estimator, unbounded)


def check_splittable_step(label: str, dofn: Any, has_side_inputs: bool, stateful: bool) -> None:
    """Refuses, when the pipeline is built, what no runner honours for a splittable DoFn."""
    signature(label, dofn)
    if has_side_inputs:
        raise PipelineConstructionError(
            f"step {label!r}: {type(dofn).__name__} is a splittable DoFn with side inputs, which "
            "headrace does not support; read the side input in a step before it and pass it in the "
            "element")
    if stateful:
        raise PipelineConstructionError(
            f"step {label!r}: {type(dofn).__name__} is a splittable DoFn with user state or "
            "timers, which Beam does not allow either; keep the state in a step after it")

