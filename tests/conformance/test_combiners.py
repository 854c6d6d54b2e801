"""Combining: CombineGlobally / CombinePerKey / CombineValues, CombineFn subclasses, combiners.

Expected values are computed with plain Python (sum, statistics, sorted, Counter).
"""

from __future__ import annotations

import collections
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

import headrace as beam
from headrace import combiners
from headrace.errors import PipelineConstructionError
from headrace.testing.util import BeamAssertException, assert_that, equal_to, is_empty
from headrace.transforms import window
from tests._support import property_settings

TV = beam.TimestampedValue


def _sums(pairs):
    out = collections.defaultdict(int)
    for k, v in pairs:
        out[k] += v
    return dict(out)


def _by_key(pairs):
    out = collections.defaultdict(list)
    for k, v in pairs:
        out[k].append(v)
    return dict(out)


# ---------------------------------------------------------------------------------------
# CombineGlobally


def test_combine_globally_sum(make_pipeline):
    values = list(range(1, 101))
    with make_pipeline(bundle_size=7) as p:
        assert_that(p | beam.Create(values) | beam.CombineGlobally(sum), equal_to([sum(values)]))


def test_combine_globally_with_user_callable_beyond_buffer(make_pipeline):
    # a non-builtin callable is applied to partial buffers and then to partial results
    values = [float(i) for i in range(1, 60)]
    with make_pipeline(bundle_size=4) as p:
        out = p | beam.Create(values) | beam.CombineGlobally(lambda vs: max(vs, default=-1.0))
        assert_that(out, equal_to([max(values)]))


def test_combine_globally_empty_input_gives_default(make_pipeline):
    with make_pipeline() as p:
        out = p | beam.Create([]) | beam.CombineGlobally(sum)
        assert_that(out, equal_to([sum([])]))


def test_combine_globally_without_defaults_on_empty_input_gives_nothing(make_pipeline):
    with make_pipeline() as p:
        out = p | beam.Create([]) | beam.CombineGlobally(sum).without_defaults()
        assert_that(out, is_empty())


def test_combine_globally_without_defaults_nonempty(make_pipeline):
    with make_pipeline() as p:
        out = p | beam.Create([4, 5]) | beam.CombineGlobally(sum).without_defaults()
        assert_that(out, equal_to([9]))


def test_combine_globally_with_defaults_on_non_global_windows_raises_at_construction(make_pipeline):
    p = make_pipeline()
    windowed = (p | beam.Create([TV(1, 1)]) | beam.WindowInto(window.FixedWindows(10)))
    with pytest.raises(PipelineConstructionError) as info:
        windowed | "SumAll" >> beam.CombineGlobally(sum)
    assert "SumAll" in str(info.value)
    assert "without_defaults" in str(info.value)


def test_combine_globally_without_defaults_per_window(make_pipeline):
    data = [(1, 1), (2, 2), (3, 15), (4, 31), (5, 39)]  # (value, timestamp)
    with make_pipeline() as p:
        out = (p | beam.Create([TV(v, t) for v, t in data])
               | beam.WindowInto(window.FixedWindows(10))
               | beam.CombineGlobally(sum).without_defaults())
        per_window = collections.defaultdict(int)
        for v, t in data:
            per_window[t // 10] += v
        assert_that(out, equal_to(list(per_window.values())))


# ---------------------------------------------------------------------------------------
# CombinePerKey / CombineValues


def test_combine_per_key_sum(make_pipeline):
    pairs = [(f"k{i % 5}", i) for i in range(100)]
    with make_pipeline(bundle_size=8) as p:
        out = p | beam.Create(pairs) | beam.CombinePerKey(sum)
        assert_that(out, equal_to(list(_sums(pairs).items())))


def test_combine_per_key_min_max_and_user_callable(make_pipeline):
    pairs = [("a", 5), ("b", -2), ("a", 9), ("b", 7), ("a", -1), ("c", 0)]
    groups = _by_key(pairs)
    with make_pipeline(bundle_size=2) as p:
        pc = p | beam.Create(pairs)
        assert_that(pc | "Min" >> beam.CombinePerKey(min),
                    equal_to([(k, min(v)) for k, v in groups.items()]), label="min")
        assert_that(pc | "Max" >> beam.CombinePerKey(max),
                    equal_to([(k, max(v)) for k, v in groups.items()]), label="max")
        assert_that(pc | "SumSq" >> beam.Map(lambda kv: (kv[0], kv[1] ** 2))
                    | "User" >> beam.CombinePerKey(lambda vs: sum(vs)),
                    equal_to([(k, sum(x * x for x in v)) for k, v in groups.items()]), label="user")


class MeanFn(beam.CombineFn):
    """Mean via a (sum, count) accumulator; compact() normalises the accumulator's type."""

    def create_accumulator(self):
        return (0, 0)

    def add_input(self, acc, x):
        return (acc[0] + x, acc[1] + 1)

    def merge_accumulators(self, accs):
        s = c = 0
        for a_s, a_c in accs:
            s += a_s
            c += a_c
        return (s, c)

    def compact(self, acc):
        return (acc[0], acc[1])

    def extract_output(self, acc):
        return None if acc[1] == 0 else acc[0] / acc[1]


def test_combine_per_key_with_combinefn_subclass(make_pipeline):
    pairs = [("a", 1), ("a", 2), ("b", 10), ("a", 6), ("b", 20), ("c", 7)]
    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create(pairs) | beam.CombinePerKey(MeanFn())
        expected = [(k, sum(v) / len(v)) for k, v in _by_key(pairs).items()]
        assert_that(out, equal_to(expected))


def test_combinefn_merge_accumulators_used_for_merging_sessions(make_pipeline):
    # sessions merge windows, so per-window accumulators must be merged with merge_accumulators
    data = [("k", 2, 0), ("k", 4, 5), ("k", 9, 12), ("k", 100, 100), ("j", 1, 3)]
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(window.Sessions(10))
               | beam.CombinePerKey(MeanFn())
               | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv, int(w.start), int(w.end))))
        # [0,10) [5,15) [12,22) overlap into [0,22); [100,110) and j's [3,13) stay alone
        expected = [(("k", (2 + 4 + 9) / 3), 0, 22), (("k", 100.0), 100, 110), (("j", 1.0), 3, 13)]
        assert_that(out, equal_to(expected))


def test_combine_globally_with_combinefn_subclass(make_pipeline):
    values = [3, 5, 10, 2]
    with make_pipeline(bundle_size=3) as p:
        out = p | beam.Create(values) | beam.CombineGlobally(MeanFn())
        assert_that(out, equal_to([sum(values) / len(values)]), label="nonempty")
        empty = p | "Empty" >> beam.Create([]) | "MeanEmpty" >> beam.CombineGlobally(MeanFn())
        assert_that(empty, equal_to([None]), label="empty")


def test_combine_values(make_pipeline):
    grouped = [("a", [1, 2, 3]), ("b", []), ("c", [10])]
    with make_pipeline() as p:
        out = p | beam.Create(grouped) | beam.CombineValues(sum)
        assert_that(out, equal_to([(k, sum(v)) for k, v in grouped]), label="sum")
        means = (p | "Create2" >> beam.Create([("a", [1, 2]), ("b", [4])])
                 | "Means" >> beam.CombineValues(MeanFn()))
        assert_that(means, equal_to([("a", 1.5), ("b", 4.0)]), label="mean")


def test_combine_values_after_group_by_key(make_pipeline):
    pairs = [("x", i) for i in range(10)] + [("y", 100)]
    with make_pipeline() as p:
        out = p | beam.Create(pairs) | beam.GroupByKey() | beam.CombineValues(sum)
        assert_that(out, equal_to(list(_sums(pairs).items())))


# ---------------------------------------------------------------------------------------
# combiners


def test_count(make_pipeline):
    words = "a b c a b a d".split()
    with make_pipeline(bundle_size=3) as p:
        pc = p | beam.Create(words)
        assert_that(pc | combiners.Count.Globally(), equal_to([len(words)]), label="globally")
        assert_that(pc | combiners.Count.PerElement(),
                    equal_to(list(collections.Counter(words).items())), label="per_element")
        keyed = pc | beam.Map(lambda w: (w, None))
        assert_that(keyed | combiners.Count.PerKey(),
                    equal_to(list(collections.Counter(words).items())), label="per_key")


def test_count_globally_of_empty_is_zero(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | beam.Create([]) | combiners.Count.Globally(), equal_to([0]))


def test_mean(make_pipeline):
    values = [1, 2, 4, 8, 16]
    pairs = [("a", 1), ("a", 4), ("b", 3)]
    with make_pipeline(bundle_size=2) as p:
        assert_that(p | "V" >> beam.Create(values) | combiners.Mean.Globally(),
                    equal_to([sum(values) / len(values)]), label="globally")
        assert_that(p | "P" >> beam.Create(pairs) | combiners.Mean.PerKey(),
                    equal_to([(k, sum(v) / len(v)) for k, v in _by_key(pairs).items()]),
                    label="per_key")


def test_mean_globally_of_empty_is_nan(make_pipeline):
    def check(actual):
        actual = list(actual)
        if len(actual) != 1 or not math.isnan(actual[0]):
            raise BeamAssertException(f"expected [nan], got {actual!r}")

    with make_pipeline() as p:
        assert_that(p | beam.Create([]) | combiners.Mean.Globally(), check)


def test_top(make_pipeline):
    values = [17, 3, 99, -4, 42, 8, 56, 23]
    with make_pipeline(bundle_size=3) as p:
        pc = p | beam.Create(values)
        assert_that(pc | "Of" >> combiners.Top.Of(3), equal_to([sorted(values, reverse=True)[:3]]),
                    label="of")
        assert_that(pc | "Largest" >> combiners.Top.Largest(2),
                    equal_to([sorted(values, reverse=True)[:2]]), label="largest")
        assert_that(pc | "Smallest" >> combiners.Top.Smallest(4), equal_to([sorted(values)[:4]]),
                    label="smallest")
        assert_that(pc | "OfMore" >> combiners.Top.Of(100),
                    equal_to([sorted(values, reverse=True)]), label="more_than_n")
        assert_that(pc | "ByKey" >> combiners.Top.Of(2, key=lambda x: -abs(x - 40)),
                    equal_to([sorted(values, key=lambda x: -abs(x - 40), reverse=True)[:2]]),
                    label="key")


def test_top_per_key(make_pipeline):
    pairs = [("a", 5), ("a", 1), ("a", 9), ("a", 7), ("b", 2), ("b", 8)]
    groups = _by_key(pairs)
    with make_pipeline(bundle_size=2) as p:
        pc = p | beam.Create(pairs)
        assert_that(pc | "Per" >> combiners.Top.PerKey(2),
                    equal_to([(k, sorted(v, reverse=True)[:2]) for k, v in groups.items()]),
                    label="largest")
        assert_that(pc | "Small" >> combiners.Top.SmallestPerKey(2),
                    equal_to([(k, sorted(v)[:2]) for k, v in groups.items()]), label="smallest")


def test_to_list(make_pipeline):
    values = ["q", "w", "e", "r", "t", "y"]
    with make_pipeline(bundle_size=4) as p:
        out = p | beam.Create(values) | combiners.ToList() | beam.Map(sorted)
        assert_that(out, equal_to([sorted(values)]))


def test_to_list_of_empty_is_one_empty_list(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | beam.Create([]) | combiners.ToList(), equal_to([[]]))


def test_latest_globally_uses_event_timestamps(make_pipeline):
    data = [("first", 10), ("last", 300), ("middle", 200), ("early", 5)]
    with make_pipeline(bundle_size=1) as p:
        out = p | beam.Create([TV(v, t) for v, t in data]) | combiners.Latest.Globally()
        assert_that(out, equal_to([max(data, key=lambda d: d[1])[0]]))


def test_latest_per_key_uses_event_timestamps(make_pipeline):
    data = [("a", "x", 10), ("a", "y", 30), ("a", "z", 20), ("b", "u", 7), ("b", "v", 3)]
    expected = {}
    for k, v, t in data:
        if k not in expected or t > expected[k][1]:
            expected[k] = (v, t)
    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create([TV((k, v), t) for k, v, t in data]) | combiners.Latest.PerKey()
        assert_that(out, equal_to([(k, vt[0]) for k, vt in expected.items()]))


def test_latest_per_key_in_fixed_windows(make_pipeline):
    data = [("k", "a", 1), ("k", "b", 5), ("k", "c", 3), ("k", "d", 15), ("k", "e", 12)]
    latest = {}
    for k, v, t in data:
        w = t // 10
        if (k, w) not in latest or t > latest[(k, w)][1]:
            latest[(k, w)] = (v, t)
    with make_pipeline() as p:
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(window.FixedWindows(10))
               | combiners.Latest.PerKey())
        assert_that(out, equal_to([(k, vt[0]) for (k, _), vt in latest.items()]))


def test_distinct(make_pipeline):
    values = [3, 1, 3, "a", "a", (1, 2), (1, 2), None, None, 1]
    expected = []
    for v in values:
        if v not in expected:
            expected.append(v)
    with make_pipeline(bundle_size=3) as p:
        assert_that(p | beam.Create(values) | beam.Distinct(), equal_to(expected))


# ---------------------------------------------------------------------------------------
# properties


def test_property_combine_per_key_sum_matches_plain_python(make_pipeline, runner):
    @property_settings(runner)
    @given(pairs=st.lists(st.tuples(st.sampled_from("abcde"), st.integers(-1000, 1000)),
                          max_size=60),
           bundle_size=st.integers(1, 8))
    def check(pairs, bundle_size):
        with make_pipeline(bundle_size=bundle_size) as p:
            pc = p | beam.Create(pairs)
            assert_that(pc | "Sum" >> beam.CombinePerKey(sum),
                        equal_to(list(_sums(pairs).items())), label="sum")
            assert_that(pc | "Count" >> combiners.Count.PerKey(),
                        equal_to(list(collections.Counter(k for k, _ in pairs).items())),
                        label="count")
    check()
