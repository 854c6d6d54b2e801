"""The Spark batch runner's balancing of splittable-DoFn works: the straggler rule
(headrace.runners.kit.sdf.StragglerRule) on a fake clock, and the packing of works by size
(batch/splittable.pack_by_size); the cutting of a straggler's rest is checked end to end in
tests/conformance/test_splittable_dofn.py. Expectations are computed from the inputs."""

from __future__ import annotations

import pytest

from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.runners.kit.sdf import StragglerRule, Work
from headrace.runners.kit.sources import to_windowed_value


class Clock:
    def __init__(self, now=1000.0):
        self.now = now

    def __call__(self):
        return self.now


def _read(rule, clock, size, rate, seconds):
    """Claims a work of `size` positions at `rate` per second for `seconds` (or to its end);
    returns the position reached when the rule fired, or None."""
    tracker = OffsetRestrictionTracker(OffsetRange(0, size))
    rule.start_work(size)
    pos, step = -1, 0.01
    start = clock.now
    try:
        while pos < size - 1 and clock.now - start < seconds:
            clock.now += step
            pos = min(size - 1, pos + max(1, int(rate * step)))
            tracker.try_claim(pos)
            if rule.straggling(tracker):
                return pos
    finally:
        rule.finish_work()
    return None


def test_the_rule_fires_for_a_worker_with_far_more_than_an_even_share():
    clock = Clock()
    # 4 cores, a wave of 4000 units; this worker holds 2500 of them and reads 1000 per second:
    # an even share takes 1 s, it would take 2.5 s
    rule = StragglerRule(4000, 4, clock.now, clock=clock)
    rule.assign(2500)
    fired_at = _read(rule, clock, 2500, 1000, 10)
    assert fired_at is not None and rule.fired
    assert fired_at < 2500 - 1000  # more than a second (the floor) of work was left


def test_the_rule_stays_quiet_for_an_even_share_and_for_a_short_rest():
    clock = Clock()
    even = StragglerRule(4000, 4, clock.now, clock=clock)
    even.assign(1000)
    assert _read(even, clock, 1000, 1000, 10) is None and not even.fired
    clock = Clock()
    # 3x an even share, but all of it takes 0.9 s: less than the floor is ever left
    short = StragglerRule(400, 4, clock.now, clock=clock)
    short.assign(300)
    assert _read(short, clock, 300, 1000 / 3, 10) is None and not short.fired


def test_pack_by_size_balances_sizes_not_counts():
    pytest.importorskip("pyspark")
    from headrace.runners.spark.batch.splittable import pack_by_size

    sizes = [500.0] + [500.0 / 63] * 63
    works = [Work(to_windowed_value(i), OffsetRange(0, 1), None, MIN_TIMESTAMP_MICROS, 0, s)
             for i, s in enumerate(sizes)]
    parts = pack_by_size(works, 4)
    totals = [sum(w.size for w in p) for p in parts]
    assert sorted(w.element.value for p in parts for w in p) == list(range(64))
    assert totals[0] == max(totals) == 500.0 and [len(p) for p in parts][0] == 1
    rest = totals[1:]
    assert max(rest) - min(rest) <= 500.0 / 63 + 1e-9  # the small ones spread evenly
