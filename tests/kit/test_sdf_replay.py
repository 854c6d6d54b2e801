"""A replayed bundle of a splittable step reads exactly what its first run read
(`SplittableStep.run_bundle`'s `replay`, which the Spark streaming runner feeds from its read
journal): the same records, the same residuals, even when its source has grown since, and a
clear error when its source no longer has what the first run read. Expectations come from the
source's contents."""

from __future__ import annotations

import math
from typing import Any, List

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.io.restriction_trackers import GrowableOffsetRangeTracker, OffsetRange
from headrace.metrics.metric import MetricsContainer
from headrace.runners.kit.sdf import NO_SPLITS, SplitPolicy, SplittableSpec, SplittableStep
from headrace.runners.kit.sources import to_windowed_value
from headrace.transforms.core import RestrictionProvider

#: the records of each "stream" (an element names one); tests append to it between runs
STREAMS: dict = {}


class _Log(RestrictionProvider):
    """An element's positions from 0 on, growing as its stream does."""

    def initial_restriction(self, element: str) -> OffsetRange:
        return OffsetRange(0, math.inf)

    def create_tracker(self, restriction: OffsetRange) -> GrowableOffsetRangeTracker:
        return GrowableOffsetRangeTracker(restriction, lambda: len(STREAMS[_current[0]]))

    def restriction_size(self, element: str, restriction: OffsetRange) -> float:
        stop = min(restriction.stop, len(STREAMS[element]))
        return float(max(0, stop - restriction.start))


_current: List[str] = [""]


@beam.DoFn.unbounded_per_element()
class _ReadLog(beam.DoFn):
    """Reads what its stream has from the restriction's start, then waits for more."""

    def process(self, element: str, tracker=beam.DoFn.RestrictionParam(_Log())):
        _current[0] = element
        pos = tracker.current_restriction().start
        while pos < len(STREAMS[element]):
            if not tracker.try_claim(pos):
                return
            yield f"{element}:{STREAMS[element][pos]}"
            pos += 1
        tracker.defer_remainder()


def _step() -> SplittableStep:
    p = beam.Pipeline(runner="LocalRunner")
    _ = p | beam.Create(["s"]) | beam.ParDo(_ReadLog())
    node = next(n for n in p.primitives() if getattr(n.transform, "is_splittable", False))
    return SplittableStep(SplittableSpec.of(node))


def _run(step: SplittableStep, works: List[Any], policy: SplitPolicy = NO_SPLITS, replay=None):
    return step.run_bundle(works, 0, policy, 1, MetricsContainer(), MetricsContainer(), replay=replay,
                           journal=True)


def _values(result) -> List[str]:
    return [wv.value for lst in result.outputs.values() for wv in lst]


def test_a_replay_reads_what_the_first_run_read_though_the_source_grew():
    STREAMS["s"] = [f"r{i}" for i in range(5)]
    step = _step()
    works = step.initial_works([to_windowed_value("s")])
    first = _run(step, works, SplitPolicy(max_claims=3))
    assert _values(first) == ["s:r0", "s:r1", "s:r2"]
    STREAMS["s"] += [f"r{i}" for i in range(5, 9)]   # the source grows before the replay
    fresh = _run(step, works)   # a run that does not replay reads what is there now
    assert _values(fresh) == [f"s:r{i}" for i in range(9)]
    again = _run(step, works, replay=first.reads)
    assert _values(again) == _values(first)
    assert again.residuals == first.residuals
    assert [r.restriction.start for r in again.residuals] == [3]
    # the residual goes on from where the first run stopped
    rest = _run(step, again.residuals)
    assert _values(rest) == [f"s:r{i}" for i in range(3, 9)]


def test_a_replay_of_other_works_reads_them_afresh():
    STREAMS["s"] = ["a", "b"]
    step = _step()
    works = step.initial_works([to_windowed_value("s")])
    first = _run(step, works, SplitPolicy(max_claims=1))
    later = _run(step, first.residuals, replay=first.reads)   # the journal of other works
    assert _values(later) == ["s:b"]


def test_a_replay_fails_when_the_source_lost_what_the_first_run_read():
    STREAMS["s"] = ["a", "b", "c"]
    step = _step()
    works = step.initial_works([to_windowed_value("s")])
    first = _run(step, works)
    assert _values(first) == ["s:a", "s:b", "s:c"]
    STREAMS["s"] = ["a"]   # trimmed
    with pytest.raises(PipelineExecutionError, match="could not read again"):
        _run(step, works, replay=first.reads)
