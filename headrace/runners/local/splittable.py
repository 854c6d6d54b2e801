"""The local runner's unit for a splittable DoFn (`kit.sdf`): the reference for every runner.

Each input bundle's elements become works (initial restrictions, split and sized) processed at
once as one bundle; what is left of them (self-checkpoints, and the runner's own splits under
`--sdf_test_split_probability`) waits in the unit until its resume time on the executor's clock
(a TestStream's virtual clock, or the system clock) and is processed in later steps, between
which the pipeline settles. The unit's output watermark is held by every waiting work.
"""

from __future__ import annotations

from typing import Any, List

from headrace.io.iobase import batched
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.pipeline.pipeline import AppliedPTransform
from headrace.runners.kit.sdf import SplitPolicy, SplittableSpec, SplittableStep, Work, next_resume
from headrace.runners.local.units import Bundle, Unit, UnitHost


class SplittableUnit(Unit):
    """A ParDo of a splittable DoFn (see the module doc); the executor steps it like a stream
    while works wait (`finished` is False)."""

    def __init__(self, ex: UnitHost, node: AppliedPTransform, options: Any) -> None:
        super().__init__(ex, node.full_label)
        self.inputs = (node.inputs[0],)
        spec = SplittableSpec.of(node)
        self.step_ = SplittableStep(spec)
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

    def input_watermark(self) -> int:
        return self.ex.watermark(self.inputs[0])

    @property
    def finished(self) -> bool:
        """True while no work waits (new input is processed as it arrives)."""
        return not self.waiting

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
        return min((w.hold_us for w in self.waiting), default=MAX_TIMESTAMP_MICROS)

    def close(self) -> None:
        self.step_.teardown()
