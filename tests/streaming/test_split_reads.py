"""Split reads (`SourcePlan.split_reads`): the Spark streaming runner reads a micro-batch's
range of an unbounded source that can be cut (`UnboundedSource.split_positions`) as one range
per partition, each read by the first level's function (their conformance:
tests/conformance/test_unbounded_sources.py)."""

from __future__ import annotations

import pytest

from headrace.errors import PipelineExecutionError
from headrace.io.iobase import UnboundedSource
from headrace.io.periodicsequence import _ImpulseSource
from headrace.runners.spark.streaming.offsets import Offset
from headrace.runners.kit.plan import Kind
from headrace.runners.spark.streaming.source import SourcePlan


def _source_of(n):
    """PeriodicImpulse's source: n impulses, one a second from 0."""
    return _ImpulseSource(0, n * 1_000_000, 1_000_000, None)


def _at(pos):
    """An offset at source positions `pos` (the rest does not matter to split reads)."""
    return Offset(0, list(pos), list(pos), [0], [0], [], [], [], [], 0, 0, {})


def _plan(*sources, parts=3):
    plan = SourcePlan(None, [(Kind.UNBOUNDED, s, {None: 7 + i}) for i, s in enumerate(sources)], 10)
    plan.labels = {i: f"Read{i}" for i in range(len(sources))}
    plan.split_reads = parts
    return plan


@pytest.mark.parametrize("start, end, n", [(0, 10, 3), (5, 6, 4), (3, 100, 2), (0, 2, 8)])

def test_periodic_impulse_cuts_a_range_into_parts_that_read_as_the_whole(start, end, n):
    src = _source_of(200)
    cuts = src.split_positions(start, end, n)
    assert len(cuts) <= n - 1 and cuts == sorted(set(cuts))
    assert all(start < c < end for c in cuts)
    bounds = [start] + cuts + [end]
    parts = [list(src.read(a, b)) for a, b in zip(bounds, bounds[1:])]
    assert [tv.value for part in parts for tv in part] == [tv.value for tv in src.read(start, end)]


def test_split_ranges_give_each_partition_one_range_of_each_source():
    plan = _plan(_source_of(100), _source_of(100))
    ranges = plan.split_ranges(_at([0, 50]), _at([9, 50]))
    assert ranges == [{0: (0, 3)}, {0: (3, 6)}, {0: (6, 9)}]


class _Whole(UnboundedSource):
    def initial_position(self):
        return "a"

    def available(self, position, now_us, max_records):
        return position

    def read(self, start, end):
        return iter(())

    def watermark(self, position):
        return 0


class _TooMany(_Whole):
    def split_positions(self, start, end, n):
        return list(range(start + 1, end))


class _Unordered(_Whole):
    def split_positions(self, start, end, n):
        return [end - 1, start + 1]   # n = 3 here


class _Failing(_Whole):
    def split_positions(self, start, end, n):
        raise ValueError("no index")


def test_a_source_that_gives_no_cuts_is_read_whole_by_the_first_partition():
    assert _plan(_Whole()).split_ranges(_at(["a"]), _at(["b"])) == [{0: ("a", "b")}, {}, {}]


@pytest.mark.parametrize("source, fragment", [
    (_TooMany(), "gave 9 positions, more than 2"),
    (_Failing(), "ValueError: no index"),
    (_Unordered(), "gave [9, 1]; give positions strictly between the two, in order"),
])

def test_a_bad_cut_names_the_step(source, fragment):
    with pytest.raises(PipelineExecutionError) as info:
        _plan(source).split_ranges(_at([0]), _at([10]))
    assert "'Read0'" in str(info.value) and fragment in str(info.value)
