"""Beam's combiners on every runner: Sample, TupleCombineFn, Top.Largest / Smallest / ...PerKey,
Latest, Count, Mean, ToList / ToDict / ToSet, without_defaults, and the two-level combines
`with_hot_key_fanout` / `with_fanout` compared with the plain combine.

Expected values are computed with plain Python from the inputs.
"""

from __future__ import annotations

import collections
import statistics

import pytest

import headrace as beam
from headrace import combiners
from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.testing.util import assert_that, equal_to, is_empty
from headrace.transforms import trigger, window

TV = beam.TimestampedValue


def _by_key(pairs):
    out = collections.defaultdict(list)
    for k, v in pairs:
        out[k].append(v)
    return dict(out)


# ---------------------------------------------------------------------------------------
# Sample


def test_sample_fixed_size_globally_draws_distinct_inputs(make_pipeline):
    values = list(range(100))
    with make_pipeline(bundle_size=9) as p:
        pc = p | beam.Create(values)

        def check_sample(actual):
            (sample,) = actual
            assert len(sample) == 10 and len(set(sample)) == 10 and set(sample) <= set(values)
        assert_that(pc | "S" >> combiners.Sample.FixedSizeGlobally(10), check_sample, label="s")
        # fewer inputs than n: all of them
        assert_that(p | "Few" >> beam.Create([1, 2, 3]) | "S3" >> combiners.Sample.FixedSizeGlobally(5)
                    | beam.Map(sorted), equal_to([[1, 2, 3]]), label="few")
        assert_that(p | "None" >> beam.Create([]) | "S0" >> combiners.Sample.FixedSizeGlobally(5),
                    equal_to([[]]), label="empty")


def test_sample_fixed_size_per_key_and_any(make_pipeline):
    pairs = [(k, i) for i in range(30) for k in "ab"]
    with make_pipeline(bundle_size=7) as p:
        pc = p | beam.Create(pairs)

        def check_per_key(actual):
            got = dict(actual)
            assert set(got) == {"a", "b"}
            for k, sample in got.items():
                assert len(sample) == 4 and len(set(sample)) == 4 and set(sample) <= set(range(30))
        assert_that(pc | combiners.Sample.FixedSizePerKey(4), check_per_key, label="perkey")

        def check_any(actual):
            assert len(actual) == 5 and len(set(actual)) == 5 and set(actual) <= set(pairs)
        assert_that(pc | combiners.Sample.Any(5), check_any, label="any")


def test_sample_rejects_a_negative_size():
    with pytest.raises(InvalidArgumentError):
        combiners.Sample.FixedSizeGlobally(-1)


# ---------------------------------------------------------------------------------------
# TupleCombineFn, Top, Latest, Count, Mean, ToList / ToDict / ToSet


def test_tuple_combine_fn_and_single_input_tuple_combine_fn(make_pipeline):
    rows = [(i, float(i) / 2, str(i)) for i in range(1, 21)]
    with make_pipeline(bundle_size=6) as p:
        pc = p | beam.Create(rows)
        fn = combiners.TupleCombineFn(sum, max, combiners.CountCombineFn())
        assert_that(pc | "T" >> beam.CombineGlobally(fn),
                    equal_to([(sum(r[0] for r in rows), max(r[1] for r in rows), len(rows))]),
                    label="tuple")
        nums = p | "Nums" >> beam.Create([r[0] for r in rows])
        single = combiners.SingleInputTupleCombineFn(min, max, combiners.MeanCombineFn())
        assert_that(nums | "S" >> beam.CombineGlobally(single),
                    equal_to([(1, 20, statistics.mean(range(1, 21)))]), label="single")
        common = combiners.TupleCombineFn(min, sum).with_common_input()
        assert_that(nums | "C" >> beam.CombineGlobally(common), equal_to([(1, 210)]), label="common")


def test_top_largest_smallest_and_per_key(make_pipeline):
    values = [7, 3, 9, 1, 12, 5, 12, 8]
    pairs = [("a", v) for v in values] + [("b", -v) for v in values]
    with make_pipeline(bundle_size=3) as p:
        pc = p | beam.Create(values)
        assert_that(pc | "L" >> combiners.Top.Largest(3), equal_to([sorted(values)[::-1][:3]]),
                    label="largest")
        assert_that(pc | "S" >> combiners.Top.Smallest(2), equal_to([sorted(values)[:2]]),
                    label="smallest")
        near = lambda v: -abs(v - 8.4)  # noqa: E731
        assert_that(pc | "LK" >> combiners.Top.Largest(2, key=near),
                    equal_to([sorted(values, key=near, reverse=True)[:2]]), label="bykey")
        kv = p | "KV" >> beam.Create(pairs)
        per = _by_key(pairs)
        assert_that(kv | "LPK" >> combiners.Top.LargestPerKey(2),
                    equal_to([(k, sorted(v)[::-1][:2]) for k, v in per.items()]), label="lpk")
        assert_that(kv | "SPK" >> combiners.Top.SmallestPerKey(2),
                    equal_to([(k, sorted(v)[:2]) for k, v in per.items()]), label="spk")
        assert_that(pc | "LargestFn" >> beam.CombineGlobally(combiners.Largest(2)),
                    equal_to([[12, 12]]), label="fn")
        assert_that(pc | "SmallestFn" >> beam.CombineGlobally(combiners.Smallest(2)),
                    equal_to([[1, 3]]), label="sfn")


def test_top_largest_without_defaults_outputs_nothing_for_empty_input_in_windows(make_pipeline):
    # in the default windowing Beam's Top.Of outputs `[]` even without defaults (test_top_ties.py)
    with make_pipeline() as p:
        empty = p | beam.Create([]) | beam.WindowInto(window.FixedWindows(10))
        assert_that(empty | "Without" >> combiners.Top.Largest(2, has_defaults=False), is_empty(),
                    label="without")


def test_global_combiners_in_windows_need_and_accept_without_defaults(make_pipeline):
    data = [TV(v, t) for v, t in [(1, 1), (2, 3), (3, 12), (4, 14), (10, 15)]]
    windows = {0: [1, 2], 10: [3, 4, 10]}

    def in_window(pc, name):
        return pc | "In" + name >> beam.Map(lambda x, w=beam.DoFn.WindowParam: (int(w.start), x))

    with make_pipeline(bundle_size=2) as p:
        pc = p | beam.Create(data) | beam.WindowInto(window.FixedWindows(10))
        cases = {
            "Count": (combiners.Count.Globally(), len),
            "Mean": (combiners.Mean.Globally(), statistics.mean),
            "ToList": (combiners.ToList(), sorted),
            "ToSet": (combiners.ToSet(), set),
            "Top": (combiners.Top.Of(2), lambda vs: sorted(vs)[::-1][:2]),
            "Latest": (combiners.Latest.Globally(), lambda vs: vs[-1]),
            "Sum": (beam.CombineGlobally(sum), sum),
        }
        for name, (combiner, expect) in cases.items():
            out = pc | name >> combiner.without_defaults()
            if name == "ToList":
                out = out | "Sort" + name >> beam.Map(sorted)
            assert_that(in_window(out, name), equal_to([(w, expect(vs)) for w, vs in windows.items()]),
                        label="check" + name)
        dicts = pc | beam.Map(lambda v: (v, v * v)) | "ToDict" >> combiners.ToDict().without_defaults()
        assert_that(in_window(dicts, "ToDict"), equal_to(
            [(w, {v: v * v for v in vs}) for w, vs in windows.items()]), label="checkToDict")


def test_global_combiner_with_defaults_in_windows_is_refused(make_pipeline):
    p = make_pipeline()
    pc = p | beam.Create([TV(1, 1)]) | beam.WindowInto(window.FixedWindows(10))
    with pytest.raises(PipelineConstructionError, match="without_defaults"):
        _ = pc | combiners.Count.Globally()


def test_count_mean_latest_per_key_and_per_element(make_pipeline):
    data = [("a", 1, 5), ("b", 2, 1), ("a", 3, 9), ("a", 5, 2), ("b", 4, 3)]
    with make_pipeline(bundle_size=2) as p:
        pc = p | beam.Create([TV((k, v), t) for k, v, t in data])
        per = _by_key([(k, v) for k, v, _ in data])
        assert_that(pc | "CountPK" >> combiners.Count.PerKey(),
                    equal_to([(k, len(v)) for k, v in per.items()]), label="count")
        assert_that(pc | "MeanPK" >> combiners.Mean.PerKey(),
                    equal_to([(k, statistics.mean(v)) for k, v in per.items()]), label="mean")
        assert_that(pc | "LatestPK" >> combiners.Latest.PerKey(), equal_to([("a", 3), ("b", 4)]),
                    label="latest")
        assert_that(pc | beam.Keys() | combiners.Count.PerElement(),
                    equal_to([("a", 3), ("b", 2)]), label="perelement")
        assert_that(pc | "Latest" >> combiners.Latest.Globally(), equal_to([("a", 3)]), label="lg")


# ---------------------------------------------------------------------------------------
# with_hot_key_fanout / with_fanout


class _MeanWithCalls(beam.CombineFn):
    """A mean whose accumulator records how it was built: (sum, count, merges)."""

    def create_accumulator(self):
        return (0, 0, 0)

    def add_input(self, acc, v):
        return (acc[0] + v, acc[1] + 1, acc[2])

    def merge_accumulators(self, accs):
        accs = list(accs)
        return (sum(a[0] for a in accs), sum(a[1] for a in accs), sum(a[2] for a in accs) + 1)

    def extract_output(self, acc):
        return (acc[0] / acc[1] if acc[1] else float("nan"), acc[1])


def _hot_data():
    # key "hot" has most values; "warm" and "cold" a few
    return ([("hot", i) for i in range(300)] + [("warm", i * 2) for i in range(20)]
            + [("cold", 7), ("cold", 11)])


@pytest.mark.parametrize("fanout", [4, lambda k: {"hot": 8, "warm": 2}.get(k, 1)],
                         ids=["constant", "per-key"])
def test_hot_key_fanout_gives_the_plain_combines_result(make_pipeline, fanout):
    data = _hot_data()
    per = _by_key(data)
    with make_pipeline(bundle_size=7) as p:
        pc = p | beam.Create(data)
        plain = pc | "Plain" >> beam.CombinePerKey(_MeanWithCalls())
        fanned = pc | "Fanned" >> beam.CombinePerKey(_MeanWithCalls()).with_hot_key_fanout(fanout)
        expected = [(k, (statistics.mean(v), len(v))) for k, v in per.items()]
        assert_that(plain, equal_to(expected), label="plain")
        assert_that(fanned, equal_to(expected), label="fanned")
        summed = pc | "Sum" >> beam.CombinePerKey(sum).with_hot_key_fanout(fanout)
        assert_that(summed, equal_to([(k, sum(v)) for k, v in per.items()]), label="sum")
        top = pc | "Top" >> beam.CombinePerKey(combiners.TopCombineFn(3)).with_hot_key_fanout(fanout)
        assert_that(top, equal_to([(k, sorted(v)[::-1][:3]) for k, v in per.items()]), label="top")
    # the fanned-out combine is two groupings: the hot keys' first level, then the merge
    labels = {n.full_label for n in p.transforms()}
    assert {"Fanned/PreCombineHot", "Fanned/PostCombine"} <= labels


@pytest.mark.parametrize("windowfn", [window.FixedWindows(10), window.SlidingWindows(10, 5),
                                      window.Sessions(3)], ids=["fixed", "sliding", "sessions"])
def test_hot_key_fanout_in_windows_matches_the_plain_combine(make_pipeline, windowfn):
    data = [TV(("hot", t), t) for t in range(0, 40)] + [TV(("hot", 100 + t), 100 + t)
                                                      for t in (0, 2, 4)] + [TV(("x", 1), 50)]
    with make_pipeline(bundle_size=5) as p:
        pc = p | beam.Create(data) | beam.WindowInto(windowfn)

        def tagged(label, combine):
            return (pc | label >> combine
                    | label + "W" >> beam.Map(lambda kv, w=beam.DoFn.WindowParam,
                                              t=beam.DoFn.TimestampParam:
                                              (kv[0], kv[1], int(w.start), int(w.end), t.micros)))
        plain = tagged("Plain", beam.CombinePerKey(sum))
        fanned = tagged("Fanned", beam.CombinePerKey(sum).with_hot_key_fanout(5))
        expected = collections.defaultdict(int)  # independent: assign and merge by hand
        if isinstance(windowfn, window.Sessions):
            for start, end, members in (((0, 42, range(40))), (100, 107, (100, 102, 104)),
                                        (50, 53, (1,))):
                key = "x" if start == 50 else "hot"
                expected[(key, start, end)] = sum(members) if key == "hot" else 1
        else:
            size = 10
            period = 5 if isinstance(windowfn, window.SlidingWindows) else 10
            for tv in data:
                k, v = tv.value
                t = int(tv.timestamp_us // 1_000_000)
                start = t - t % period
                while start > t - size:
                    expected[(k, start, start + size)] += v
                    start -= period
        want = [(k, s, st, en, en * 1_000_000 - 1) for (k, st, en), s in expected.items()]
        assert_that(plain, equal_to(want), label="plain")
        assert_that(fanned, equal_to(want), label="fanned")


def test_hot_key_fanout_with_late_data_and_an_accumulating_mode_on_a_test_stream(make_pipeline):
    from headrace.testing.test_stream import TestStream
    p = make_pipeline()
    stream = (TestStream()
              .add_elements([TV(("k", v), v) for v in range(5)])
              .advance_watermark_to(20)
              .add_elements([TV(("k", 100), 3)])  # late, within the allowed lateness
              .advance_watermark_to(40)
              .add_elements([TV(("k", 1000), 4)])  # past the lateness: dropped
              .advance_watermark_to_infinity())
    windowed = p | stream | beam.WindowInto(
        window.FixedWindows(10), allowed_lateness=15,
        accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
    panes = windowed | beam.CombinePerKey(sum).with_hot_key_fanout(3) | beam.Map(
        lambda kv, pane=beam.DoFn.PaneInfoParam: (kv, pane.timing.name))
    # as the plain combine: an on-time pane with 0..4, a late pane accumulating the late 100
    assert_that(panes, equal_to([(("k", 10), "ON_TIME"), (("k", 110), "LATE")]))
    p.run().wait_until_finish()


def test_combine_globally_with_fanout_gives_the_plain_result(make_pipeline):
    values = list(range(1, 501))
    with make_pipeline(bundle_size=11) as p:
        pc = p | beam.Create(values)
        assert_that(pc | "Sum" >> beam.CombineGlobally(sum).with_fanout(6), equal_to([sum(values)]),
                    label="sum")
        assert_that(pc | "Mean" >> beam.CombineGlobally(combiners.MeanCombineFn()).with_fanout(3),
                    equal_to([statistics.mean(values)]), label="mean")
        empty = p | "Empty" >> beam.Create([])
        assert_that(empty | "EmptySum" >> beam.CombineGlobally(sum).with_fanout(4), equal_to([0]),
                    label="empty")
        windowed = (p | "W" >> beam.Create([TV(v, v) for v in values])
                    | beam.WindowInto(window.FixedWindows(100)))
        per_window = (windowed | "WSum" >> beam.CombineGlobally(sum).with_fanout(4).without_defaults()
                      | beam.Map(lambda s, w=beam.DoFn.WindowParam: (int(w.start), s)))
        expected = collections.defaultdict(int)
        for v in values:
            expected[v // 100 * 100] += v
        assert_that(per_window, equal_to(list(expected.items())), label="windowed")


def test_hot_key_fanout_refuses_early_firing_triggers_and_bad_fanouts(make_pipeline):
    p = make_pipeline()
    pc = p | beam.Create([("k", 1)]) | beam.WindowInto(
        window.FixedWindows(10), trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
        accumulation_mode=trigger.AccumulationMode.DISCARDING)
    with pytest.raises(PipelineConstructionError, match="fires on the watermark only"):
        _ = pc | beam.CombinePerKey(sum).with_hot_key_fanout(2)
    with pytest.raises(InvalidArgumentError, match="int or a function"):
        beam.CombinePerKey(sum).with_hot_key_fanout("2")
    with pytest.raises(InvalidArgumentError, match="needs an int"):
        beam.CombineGlobally(sum).with_fanout(2.5)
    assert isinstance(beam.CombinePerKey(sum).with_hot_key_fanout(None), beam.CombinePerKey)


def test_hot_key_fanout_function_must_return_an_int(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    _ = p | beam.Create([("k", 1)]) | beam.CombinePerKey(sum).with_hot_key_fanout(lambda k: "3")
    with pytest.raises(Exception, match="must return an int"):
        p.run()
