"""The local runner's executor: plans the pipeline into units and runs them to completion.

It plans with the runner kit (`runners.kit.plan`) and makes one unit (`units.py`) per planned
unit, then *settles*: asks every unit to run its queued bundles, moves watermarks, and calls
back groupings whose processing-time wakeups are due, until nothing moves. With TestStreams,
it performs one event at a time and settles after each (see `LocalRunner`'s module doc); an
unbounded Read likewise reads what its source has now, then the pipeline settles.
"""

from __future__ import annotations

import gc
import time
from typing import Any, Dict, List, Optional, Sequence, Union

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import Read
from headrace.metrics.metric import MetricsContainer
from headrace.options.pipeline_options import LocalRunnerOptions
from headrace.pipeline.pipeline import AppliedPTransform, Pipeline
from headrace.pipeline.pvalue import PCollection
from headrace.runners.kit import plan as planning
from headrace.runners.kit.runtime import relax_gc
from headrace.runners.kit.side_inputs import SideInputReader
from headrace.runners.local.clock import RealClock, VirtualClock
from headrace.runners.local.splittable import POLL_SECONDS, SplittableUnit
from headrace.runners.local.units import (
    Bundle, GroupUnit, PassUnit, SourceUnit, StageUnit, StatefulUnit, TagOutput, TestStreamUnit,
    Unit, UnitHost,
)


class Executor(UnitHost):
    """Runs one pipeline on the local runner (see the module doc); units see it as a `UnitHost`."""

    def __init__(self, pipeline: Pipeline, options: Any) -> None:
        lo = options.view_as(LocalRunnerOptions)
        self.bundle_size = max(1, int(lo.bundle_size))
        self.max_attempts = max(1, int(lo.max_bundle_attempts))
        self.parallelism = 2
        self.committed = MetricsContainer()
        self.attempted = MetricsContainer()
        self.units: List[Unit] = []
        self.unit_of_input: Dict[PCollection, List[Unit]] = {}
        self.producer_unit: Dict[PCollection, Union[Unit, TagOutput]] = {}
        self.streams: List[Union[TestStreamUnit, SplittableUnit]] = []
        self.options = options
        self._next_stream = 0
        self.side_contents: Dict[PCollection, Dict[Any, list]] = {}
        self.side_pcolls: set = set()
        self._build(pipeline)
        virtual = any(isinstance(u, TestStreamUnit) for u in self.streams)
        self.clock: Union[RealClock, VirtualClock] = VirtualClock() if virtual else RealClock()
        self.ptime_units: List[Any] = [
            u for u in self.units
            if (isinstance(u, GroupUnit) and not u.watermark_only) or isinstance(u, StatefulUnit)]

    def _build(self, pipeline: Pipeline) -> None:
        """One unit per planned unit, wired to the units that read its outputs."""
        for planned in planning.plan(pipeline, "local runner"):
            unit: Unit
            if isinstance(planned, planning.Stage):
                unit = StageUnit(self, planned)
            elif planned.kind == planning.Kind.SOURCE and isinstance(planned.node.transform, Read):
                unit = SplittableUnit.for_read(self, planned.node, self.options.view_as(LocalRunnerOptions))
                self.streams.append(unit)
            elif planned.kind == planning.Kind.SOURCE:
                unit = SourceUnit(self, planned.node)
            elif planned.kind == planning.Kind.TEST_STREAM:
                unit = TestStreamUnit(self, planned.node)
                self.streams.append(unit)
            elif planned.kind == planning.Kind.UNBOUNDED:
                unit = SplittableUnit.for_read(self, planned.node, self.options.view_as(LocalRunnerOptions))
                self.streams.append(unit)
            elif planned.kind == planning.Kind.GROUPING:
                unit = GroupUnit(self, planned.node)
            elif planned.kind == planning.Kind.STATEFUL:
                unit = StatefulUnit(self, planned.node)
            elif planned.kind == planning.Kind.SPLITTABLE:
                unit = SplittableUnit(self, planned.node, self.options.view_as(LocalRunnerOptions))
                self.streams.append(unit)
            else:
                unit = PassUnit(self, planned.node)
            self.units.append(unit)
        for unit in self.units:
            for pc in unit.outputs:
                self.producer_unit[pc] = unit
            if isinstance(unit, TestStreamUnit):
                self.producer_unit.update(unit.tag_outputs)
        for unit in self.units:
            for pc in unit.inputs:
                self.unit_of_input.setdefault(pc, []).append(unit)
            for pc in unit.side_pcolls:
                self.side_pcolls.add(pc)
                self.side_contents.setdefault(pc, {})

    # ---- data flow ------------------------------------------------------------------

    def emit(self, pc: PCollection, bundle: Bundle) -> None:
        """Hands a bundle of `pc` to the units that read it (and to its side-input contents)."""
        if pc in self.side_pcolls:
            contents = self.side_contents[pc]
            for wv in bundle:
                for w in wv.windows:
                    contents.setdefault(w, []).append(wv.value)
        wm = self.watermark(pc)
        for unit in self.unit_of_input.get(pc, ()):
            unit.enqueue(bundle, wm)

    def watermark(self, pc: PCollection) -> int:
        """The output watermark of the unit that produces `pc`, in microseconds."""
        return self.producer_unit[pc].output_wm

    def side_input_reader(self, nodes: Sequence[AppliedPTransform]) -> Optional[SideInputReader]:
        """A reader of the side inputs of `nodes` (None when they have none); the contents of a
        side input are kept from the first time a unit asks for a reader of it."""
        contents = {s: self.side_contents.setdefault(s.pvalue, {})
                    for n in nodes for s in n.side_inputs}
        return SideInputReader(contents) if contents else None

    def idle_until(self, micros: int) -> None:
        """Lets processing time pass towards `micros` (see `UnitHost.idle_until`)."""
        clock = self.clock
        if isinstance(clock, VirtualClock):
            if micros > clock.now() and not any(
                    isinstance(u, TestStreamUnit) and not u.finished for u in self.streams):
                clock.advance(micros - clock.now())
            return
        time.sleep(min(max(0, micros - clock.now()) / 1e6, POLL_SECONDS))

    def _advance_watermarks(self) -> bool:
        changed = False
        for unit in self.units:
            in_wm = unit.input_watermark()
            unit.on_input_watermark(in_wm)
            new = in_wm if not unit.queue else unit.output_wm
            new = min(new, unit.hold())
            if new > unit.output_wm:
                unit.output_wm = new
                unit.output_watermark_moved(new)
                changed = True
        return changed

    def _fire_processing_time(self) -> bool:
        now = self.clock.now()
        fired = False
        for unit in self.ptime_units:
            if unit.on_processing_time(now):
                fired = True
        return fired

    def _settle(self) -> None:
        """Runs until nothing moves: queues drained, watermarks propagated, due timers fired."""
        ptime = bool(self.ptime_units)
        while True:
            progressed = False
            for unit in self.units:
                if unit.run_pending():
                    progressed = True
            if self._advance_watermarks():
                progressed = True
            if ptime and self._fire_processing_time():
                progressed = True
            if not progressed:
                break

    def _step_streams(self) -> bool:
        """Performs the next event of the next unfinished TestStream (round robin); False when none."""
        n = len(self.streams)
        for i in range(n):
            unit = self.streams[(self._next_stream + i) % n]
            if not unit.finished:
                unit.step()
                self._next_stream = (self._next_stream + i + 1) % n
                return True
        return False

    def run(self) -> None:
        # Collect cyclic garbage less often while the pipeline runs (`kit.runtime.relax_gc`).
        gc.freeze()
        thresholds = relax_gc()
        try:
            self._settle()
            while self._step_streams():
                self._settle()
            stuck = [u.label for u in self.units if u.has_work()]
            if stuck:
                raise PipelineExecutionError(
                    f"the pipeline stopped with unprocessed input in {stuck}; a side input's "
                    "watermark never passed the windows its readers need")
        finally:
            gc.set_threshold(*thresholds)
            gc.unfreeze()
            for unit in self.units:
                unit.close()
