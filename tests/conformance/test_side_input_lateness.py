"""Late data after a step with a windowed side input (unbounded input, TestStream).

Hourly fixed windows without allowed lateness on a stream of (user, team, score); the side
input, derived from the same windowed stream, is the set of users whose hourly score is above
twice the mean user score of that hour (CombinePerKey(sum), then the mean of the sums as a
singleton view, then the users above twice it collected with ToDictCombineFn into a singleton
view). The main input drops those users with a Filter reading that view, then sums scores per
team and hour. Events of hour 0 that arrive after the watermark passed the end of hour 0 are
late: every grouping drops and counts them, whether or not the step before it waited for its
side input (docs/semantics.md, "Side inputs and lateness").

The expectation is computed in plain Python from the same events, below.
"""

from __future__ import annotations

import collections
from typing import Dict, List, Tuple

import pytest

import headrace as beam
from headrace.metrics.metric import MetricsFilter
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import combiners, window

TV = beam.TimestampedValue
HOUR = 3600
TEAMS = {"ann": "red", "bob": "red", "cat": "blue", "dan": "blue", "eve": "green"}

# (user, score, event time in seconds)
ON_TIME_HOUR_0 = [("ann", 3, 10), ("bob", 4, 200), ("cat", 5, 900), ("dan", 2, 1800),
                  ("eve", 60, 2400), ("ann", 1, 3000)]
LATE_HOUR_0 = [("bob", 7, 1000), ("cat", 8, 3500), ("eve", 9, 100)]  # after the watermark: 3700
HOUR_1 = [("ann", 2, HOUR + 5), ("cat", 6, HOUR + 100), ("dan", 4, HOUR + 200),
          ("bob", 30, HOUR + 300)]
LATE_HOUR_1 = [("dan", 11, HOUR + 50)]                                # after the watermark: 7300


def _stream() -> TestStream:
    def events(rows):
        return [TV((u, TEAMS[u], s), t) for u, s, t in rows]
    return (TestStream()
            .add_elements(events(ON_TIME_HOUR_0))
            .add_elements(events(HOUR_1[:2]))     # early events of hour 1: they wait for its side input
            .advance_watermark_to(HOUR + 100)
            .add_elements(events(LATE_HOUR_0))
            .add_elements(events(HOUR_1[2:]))
            .advance_watermark_to(2 * HOUR + 100)
            .add_elements(events(LATE_HOUR_1))
            .advance_watermark_to_infinity())


def _expected() -> Tuple[List[Tuple[str, int, int]], int]:
    """(team, hour, sum) of the on-time events of non-spammers, and how many late events reach
    the per-team grouping (those of users who are not that hour's spammers)."""
    on_time = {0: ON_TIME_HOUR_0, 1: HOUR_1}
    late = {0: LATE_HOUR_0, 1: LATE_HOUR_1}
    sums: Dict[Tuple[str, int], int] = collections.defaultdict(int)
    late_reaching = 0
    for hour, rows in on_time.items():
        per_user: Dict[str, int] = collections.defaultdict(int)
        for u, s, _ in rows:
            per_user[u] += s
        mean = sum(per_user.values()) / len(per_user)
        spammers = {u for u, total in per_user.items() if total > 2 * mean}
        for u, s, _ in rows:
            if u not in spammers:
                sums[(TEAMS[u], hour)] += s
        late_reaching += sum(1 for u, _, _ in late[hour] if u not in spammers)
    return sorted((team, hour, total) for (team, hour), total in sums.items()), late_reaching


def _team_sums(p, with_side_input: bool, lateness: int):
    events = p | _stream() | "Hourly" >> beam.WindowInto(window.FixedWindows(HOUR),
                                                          allowed_lateness=lateness)
    if with_side_input:
        user_sums = (events | "UserScore" >> beam.Map(lambda e: (e[0], e[2]))
                     | "SumPerUser" >> beam.CombinePerKey(sum))
        mean = (user_sums | "Scores" >> beam.Values()
                | "Mean" >> beam.CombineGlobally(combiners.MeanCombineFn()).as_singleton_view())
        spammers = (user_sums
                    | "AboveTwiceMean" >> beam.Filter(lambda kv, m: kv[1] > 2 * m, mean)
                    | "Spammers" >> beam.CombineGlobally(
                        combiners.ToDictCombineFn()).as_singleton_view())
        kept = events | "DropSpammers" >> beam.Filter(lambda e, spam: e[0] not in spam, spammers)
    else:  # the same users, known beforehand: no side input, nothing waits
        _, known = _spammers_by_hour()
        kept = events | "DropSpammers" >> beam.Filter(
            lambda e, w=beam.DoFn.WindowParam: e[0] not in known[int(w.start)])
    return (kept
            | "TeamScore" >> beam.Map(lambda e: (e[1], e[2]))
            | "SumPerTeam" >> beam.CombinePerKey(sum)
            | "Format" >> beam.MapTuple(lambda team, total, w=beam.DoFn.WindowParam:
                                        (team, int(w.start) // HOUR, total)))


def _spammers_by_hour():
    known = {}
    for start, rows in ((0, ON_TIME_HOUR_0), (HOUR, HOUR_1)):
        per_user: Dict[str, int] = collections.defaultdict(int)
        for u, s, _ in rows:
            per_user[u] += s
        mean = sum(per_user.values()) / len(per_user)
        known[start] = {u for u, total in per_user.items() if total > 2 * mean}
    return None, known


def _dropped_at(result, step: str) -> int:
    found = result.metrics().query(
        MetricsFilter().with_namespace("headrace").with_name("dropped_late_elements"))
    return sum(r.committed for r in found["counters"] if r.key.step == step)


# The late events come when the watermark is 100 s past the end of their hour: late with no
# allowed lateness, and, with 100 s, by the least margin (max timestamp + 100 s < watermark),
# so a grouping that saw an older watermark than the one they came at would keep them.
LATENESS = pytest.mark.parametrize("lateness", [0, 100])


@LATENESS
def test_late_data_after_a_windowed_side_input_is_dropped_and_counted(make_pipeline, lateness):
    expected, late_reaching = _expected()
    assert late_reaching == 3  # bob and cat in hour 0 (eve is a spammer), dan in hour 1
    p = make_pipeline()
    assert_that(_team_sums(p, with_side_input=True, lateness=lateness), equal_to(expected))
    result = p.run()
    assert _dropped_at(result, "SumPerTeam") == late_reaching
    # the side input's own groupings drop every late event too
    assert _dropped_at(result, "SumPerUser") == len(LATE_HOUR_0) + len(LATE_HOUR_1)


@LATENESS
def test_waiting_for_a_side_input_does_not_change_what_is_late(make_pipeline, lateness):
    # The same pipeline with the spammers known beforehand instead of read from a side input:
    # the same output, and the same elements dropped and counted at the per-team grouping.
    expected, late_reaching = _expected()
    p = make_pipeline()
    assert_that(_team_sums(p, with_side_input=False, lateness=lateness), equal_to(expected))
    assert _dropped_at(p.run(), "SumPerTeam") == late_reaching
