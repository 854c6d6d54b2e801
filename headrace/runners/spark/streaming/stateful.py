"""The stateful-ParDo operator of the streaming runner: DoFns with user state and timers
(`kit.stateful`), their keys kept in buckets as a grouping's are (`buckets`), each key's record
holding its `UserKeyState`.

A key visited in a batch runs two bundles of the DoFn: the watermark it missed and its new
elements, then this batch's watermark and processing time; each bundle is retried whole on
failure, from the key's record as it was before it.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, NamedTuple, Tuple

from headrace.metrics.metric import MetricsContainer
from headrace.model import coders
from headrace.runners.kit.stateful import (
    StatefulCore, StatefulSpec, StatefulStep, UserKeyState, keyed_elements,
)
from headrace.runners.spark.streaming.buckets import (
    MAX, BucketOperator, KeyCell, KeyRecord, Outputs, wakeup_clock,
)
from headrace.runners.spark.streaming.offsets import Control


class StatefulStepSpec(NamedTuple):
    """A stateful ParDo (user state and timers) as the processor runs it (picklable): its keys
    are kept in buckets as a grouping's are, each key's record holding its `UserKeyState`."""

    ref: int
    spec: StatefulSpec

    @property
    def label(self) -> str:
        """The step's label."""
        return self.spec.label


class StatefulOperator(BucketOperator):
    """The stateful ParDos of one processor (`specs`: by index), each built on first use."""

    def __init__(self, cell: KeyCell, specs: Dict[int, StatefulStepSpec], max_attempts: int) -> None:
        super().__init__(cell)
        self.specs = specs
        self.max_attempts = max_attempts
        self.steps: Dict[int, StatefulStep] = {}

    def visit(self, g: int, ctl: Control, recs: Dict[bytes, KeyRecord], kb: bytes, got: Any,
              outs: Outputs, metrics: MetricsContainer) -> None:
        """One key of a stateful ParDo's bucket (`got`: its new elements by bundle, None: none):
        its two bundles (see the module doc), then its hold and wakeups, or it is forgotten."""
        step = self._step(g)
        batches = got or {}
        rec = recs.get(kb)
        if rec is None:
            if not batches:
                return
            k = batches[min(batches)][0][1].value[0]
            rec = recs[kb] = KeyRecord(k, UserKeyState(), ctl.input_watermarks_before[g])
        assert isinstance(rec.state, UserKeyState)
        arrived = [wv for bundle in sorted(batches)
                   for _, wv in sorted(batches[bundle], key=lambda x: x[0])]
        elements = [one for _, one in keyed_elements(self.specs[g].label, arrived)]
        arrive, advance = _bundles(rec, elements, ctl.input_watermarks_before[g],
                                   ctl.input_watermarks[g], ctl.processing_times[g])
        for body, bundle in ((arrive, 2 * ctl.batch), (advance, 2 * ctl.batch + 1)):
            self._run_bundle(step, rec, body, metrics, outs, bundle)
        core = step.core()
        state = rec.state
        if state.is_empty():
            del recs[kb]
            rec.timer, rec.hold, rec.ptime = None, MAX, MAX
            return
        rec.hold = core.output_hold(state)
        rec.ptime = core.next_processing_time(state)
        rec.timer = wakeup_clock(core.next_event_time(state), rec.ptime, ctl)

    def close(self) -> None:
        """Tears down the steps' DoFns."""
        for step in self.steps.values():
            step.teardown()

    def _step(self, g: int) -> StatefulStep:
        """Stateful ParDo `g`'s step."""
        step = self.steps.get(g)
        if step is None:
            step = self.steps[g] = StatefulStep(self.specs[g].spec)
        return step

    def _run_bundle(self, step: StatefulStep, rec: KeyRecord, body: Callable[[StatefulCore], None],
                    metrics: MetricsContainer, outs: Outputs, bundle: int) -> None:
        """Runs one bundle of a key (retried whole, from its record as it was before), its
        output added to `outs` as bundle `bundle`."""
        before: Tuple[bytes, int] = (coders.dumps(rec.state), rec.seen)

        def restore() -> None:
            rec.state, rec.seen = coders.loads(before[0]), before[1]

        got = step.run_bundle(body, restore, self.max_attempts, metrics, MetricsContainer())
        for pc, lst in got.items():
            if lst:
                outs.setdefault((pc, bundle), []).extend(lst)


def _bundles(rec: KeyRecord, elements: List[Any], prev: int, cur: int, pt: int
             ) -> Tuple[Callable[[StatefulCore], None], Callable[[StatefulCore], None]]:
    """A key's two bundles: the watermark `prev` it missed and its new `elements`; then this
    batch's watermark `cur` and processing time `pt`."""

    def arrive(core: StatefulCore) -> None:
        if rec.seen < prev:
            core.on_watermark(rec.key, rec.state, prev, pt)
            rec.seen = prev
        if elements:
            core.process(rec.key, rec.state, elements, prev, pt)

    def advance(core: StatefulCore) -> None:
        if cur > rec.seen:
            core.on_watermark(rec.key, rec.state, cur, pt)
            rec.seen = cur
        core.on_processing_time(rec.key, rec.state, pt, cur)

    return arrive, advance
