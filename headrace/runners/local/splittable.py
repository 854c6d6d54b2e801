"""The local runner's unit for a splittable DoFn (`kit.sdf`): the reference for every runner.

Every `Read` runs here too, as Beam's wrappers of legacy sources (`io.iobase.BoundedSourceReader`
over a bounded source's parts, `UnboundedSourceReader` over an unbounded one's positions): the
local runner reads everything through this one mechanism.

Each input bundle's elements become works (initial restrictions, split and sized) processed at
once as one bundle; what is left of them (self-checkpoints, and the runner's own splits under
`--sdf_test_split_probability`) waits in the unit until its resume time on the executor's clock
(a TestStream's virtual clock, or the system clock) and is processed in later steps, between
which the pipeline settles. The unit's output watermark is held by every waiting work.
"""

from __future__ import annotations

from typing import Any, List, Optional

from headrace.io.iobase import (
    BoundedSource, BoundedSourceReader, Read, UnboundedSourceReader, batched,
)
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.pipeline.pipeline import AppliedPTransform
from headrace.runners.kit.sdf import (
    SplitPolicy, SplittableSpec, SplittableStep, Work, next_resume, read_spec, read_works,
)
from headrace.runners.local.units import Bundle, Unit, UnitHost

#: Seconds an unbounded source with nothing new is left before it is asked again.
POLL_SECONDS = 0.02


class SplittableUnit(Unit):
    """A ParDo of a splittable DoFn, or a Read run as one (`for_read`; see the module doc); the
    executor steps it like a stream while works wait (`finished` is False)."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform, options: Any,
                 spec: Optional[SplittableSpec] = None) -> None:
        super().__init__(ex, node.full_label)
        self.inputs = tuple(node.inputs[:1])
        spec = spec or SplittableSpec.of(node)
        self.step_ = SplittableStep(spec)
        self.initial: List[Work] = []  # a Read's works, processed at its first run
        by_id = {pc._id: pc for pc in node.outputs.values()}
        self.out_pcs = [(pc_id, by_id[pc_id])
                        for pc_id in dict.fromkeys(p for _, p in spec.step.outputs)]
        self.outputs = tuple(pc for _, pc in self.out_pcs)
        self.waiting: List[Work] = []
        # a bundle is at most bundle_size claims: the rest of a restriction is split off and
        # processed in the next bundle (memory stays bounded, outputs flow bundle by bundle)
        self.policy = SplitPolicy(
            max_claims=ex.bundle_size,
            test_split_probability=float(getattr(options, "sdf_test_split_probability", 0.0) or 0.0),
            seed=int(getattr(options, "sdf_test_split_seed", 0) or 0))

    @classmethod
    def for_read(cls, ex: UnitHost, node: AppliedPTransform, options: Any) -> "SplittableUnit":
        """A Read as a splittable DoFn over its source (`io.iobase`'s wrappers): every source is
        read by the one mechanism."""
        transform = node.transform
        assert isinstance(transform, Read)
        source = transform.source
        reader: Any = (BoundedSourceReader(ex.parallelism) if isinstance(source, BoundedSource)
                       else UnboundedSourceReader(ex.bundle_size, POLL_SECONDS))
        unit = cls(ex, node, options, read_spec(node, reader))
        unit.initial = read_works(unit.label, source, ex.parallelism, unit.step_)
        return unit

    def input_watermark(self) -> int:
        return self.ex.watermark(self.inputs[0]) if self.inputs else MAX_TIMESTAMP_MICROS

    @property
    def finished(self) -> bool:
        """True while no work waits (new input is processed as it arrives)."""
        return not self.waiting and not self.initial

    def has_work(self) -> bool:
        return bool(self.queue) or bool(self.initial)

    def run_pending(self) -> bool:
        progressed = False
        if self.initial:
            works, self.initial = self.initial, []
            self._run(works)
            progressed = True
        return super().run_pending() or progressed

    def process_bundle(self, bundle: Bundle) -> None:
        self._run(self.step_.initial_works(bundle))

    def _run(self, works: List[Work]) -> None:
        """Processes the due works in bundles; the parts this runner split off (resumable at
        once) follow in further bundles, the self-checkpoints' rests wait for a later step."""
        ex = self.ex
        now = ex.clock.now()
        due = [w for w in works if w.resume_at_us <= now]
        self.waiting.extend(w for w in works if w.resume_at_us > now)
        while due:
            result = self.step_.run_bundle(due, now, self.policy, ex.max_attempts, ex.committed,
                                           ex.attempted, finalize=False)
            for pc_id, pc in self.out_pcs:
                for chunk in batched(result.outputs[pc_id], ex.bundle_size):
                    ex.emit(pc, chunk)
            self.step_.finalize_bundle()  # the outputs are in the executor's hands
            due = [w for w in result.residuals if w.resume_at_us == MIN_TIMESTAMP_MICROS]
            self.waiting.extend(w for w in result.residuals if w.resume_at_us != MIN_TIMESTAMP_MICROS)

    def step(self) -> None:
        """Processes the works due now; when none is, lets processing time reach the next."""
        now = self.ex.clock.now()
        if next_resume(self.waiting) > now:
            self.ex.idle_until(next_resume(self.waiting))
            return
        works, self.waiting = self.waiting, []
        self._run(works)

    def hold(self) -> int:
        return min((w.hold_us for w in self.waiting + self.initial), default=MAX_TIMESTAMP_MICROS)

    def close(self) -> None:
        self.step_.teardown()
