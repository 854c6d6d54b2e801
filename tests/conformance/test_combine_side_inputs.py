"""Side inputs to CombinePerKey / CombineGlobally / CombineValues, as in Beam.

The extra arguments of a combine go to every CombineFn method (`create_accumulator(*args,
**kwargs)`, `add_input(acc, x, *args, **kwargs)`, `merge_accumulators(accs, *args, **kwargs)`,
`extract_output(acc, *args, **kwargs)`) or to the callable (`fn(values, *args)`); a side-input
view among them is replaced by its value in the window of the pane being combined, read as a
ParDo reads it (the side window holding the pane window's max timestamp; for merging windows
the merged window). Beam (checked with apache-beam 2.77, which runs such a combine as
LiftedCombinePerKey: a partial combine before the GroupByKey, merge and extract after it)
resolves them the same way; where Beam's lifting leaks (output timestamps at the window end,
data-driven triggers counting partial accumulators, session elements reading the side input of
their own proto-window) headrace keeps the semantics of a combine without side inputs.
"""

from __future__ import annotations

import collections

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as beam
from headrace import pvalue
from headrace.errors import PipelineConstructionError, PipelineExecutionError
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import trigger, window

TV = beam.TimestampedValue
US = 1_000_000


class CappedSumFn(beam.CombineFn):
    """Sums `x * scale` over the inputs below `limit`; the output also lists, for each method
    called, the (repr of the) side-input values it was given."""

    def create_accumulator(self, limit, scale=1):
        return (0, frozenset({("create", repr(limit), repr(scale))}))

    def add_input(self, acc, x, limit, scale=1):
        return (acc[0] + (x * scale if x < limit else 0), acc[1] | {("add", repr(limit), repr(scale))})

    def merge_accumulators(self, accumulators, limit, scale=1):
        accumulators = list(accumulators)
        seen = frozenset({("merge", repr(limit), repr(scale))}).union(*(a[1] for a in accumulators))
        return (sum(a[0] for a in accumulators), seen)

    def extract_output(self, acc, limit, scale=1):
        return (acc[0], sorted(acc[1] | {("extract", repr(limit), repr(scale))}))


def calls_with(limit, scale=1):
    """What CappedSumFn lists when every method got `limit` and `scale`."""
    return sorted((m, repr(limit), repr(scale)) for m in ("create", "add", "merge", "extract"))


def capped_sums(pairs, limit, scale=1):
    out = collections.defaultdict(int)
    for k, v in pairs:
        out[k] += v * scale if v < limit else 0
    return out


def with_window(kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
    return (kv[0], kv[1], float(w.start), float(w.end), ts.micros)


PAIRS = [(k, v) for k in "abc" for v in range(1, 25, 3)] + [("d", 100)]


def test_combine_fn_methods_receive_the_side_input_values(make_pipeline):
    limit, scale = 17, 3
    with make_pipeline(bundle_size=5) as p:
        limit_pc = p | "Limit" >> beam.Create([limit])
        scale_pc = p | "Scale" >> beam.Create([scale])
        out = (p | beam.Create(PAIRS)
               | beam.CombinePerKey(CappedSumFn(), pvalue.AsSingleton(limit_pc),
                                    scale=pvalue.AsSingleton(scale_pc)))
        expected = [(k, (s, calls_with(limit, scale))) for k, s in capped_sums(PAIRS, limit, scale).items()]
        assert_that(out, equal_to(expected))


def test_constant_extra_arguments_go_to_every_method(make_pipeline):
    # (merge_accumulators is called only when a runner merges accumulators)
    expected = capped_sums(PAIRS, 10, 2)
    with make_pipeline() as p:
        out = p | beam.Create(PAIRS) | beam.CombinePerKey(CappedSumFn(), 10, scale=2)

        def check(actual):
            assert sorted(k for k, _ in actual) == sorted(expected), actual
            for k, (total, calls) in actual:
                assert total == expected[k], actual
                assert {m for m, _, _ in calls} >= {"create", "add", "extract"}, calls
                assert {(lim, sc) for _, lim, sc in calls} == {("10", "2")}, calls
        assert_that(out, check)


def test_side_input_is_read_in_the_window_of_each_pane(make_pipeline):
    # main and side in FixedWindows(10): each window's combine reads its own limit
    main_data = [("a", v, t) for v, t in [(1, 1), (5, 3), (8, 8), (2, 12), (9, 25), (4, 28)]]
    main_data += [("b", v, t) for v, t in [(7, 2), (3, 21), (6, 22)]]
    limits = {0: 6, 1: 100, 2: 5}  # window index -> limit
    with make_pipeline(bundle_size=3) as p:
        side = (p | "Side" >> beam.Create([TV(lim, i * 10 + 4) for i, lim in limits.items()])
                | "WSide" >> beam.WindowInto(window.FixedWindows(10)))
        out = (p | "Main" >> beam.Create([TV((k, v), t) for k, v, t in main_data])
               | "WMain" >> beam.WindowInto(window.FixedWindows(10))
               | beam.CombinePerKey(CappedSumFn(), pvalue.AsSingleton(side))
               | beam.Map(with_window))
        groups = collections.defaultdict(list)
        for k, v, t in main_data:
            groups[(k, t // 10)].append(v)
        expected = [(k, (sum(v for v in vs if v < limits[i]), calls_with(limits[i])),
                     i * 10.0, i * 10.0 + 10, (i * 10 + 10) * US - 1)  # default: end of window
                    for (k, i), vs in groups.items()]
        assert_that(out, equal_to(expected))


def sessions_of(times, gap):
    """[(start, end, [times])] of the sessions of a key's event times."""
    out = []
    for t in sorted(times):
        if out and t < out[-1][1]:
            out[-1][1] = max(out[-1][1], t + gap)
            out[-1][2].append(t)
        else:
            out.append([t, t + gap, [t]])
    return out


def test_merged_session_reads_the_side_input_of_the_merged_window(make_pipeline):
    # the session [25, 33) reads the side window holding 32.999999 ([30, 40)), also for the
    # element at 25 (Beam's lifted combine gives that element the side input of [25, 30)'s
    # side window [20, 30) when it is added, and the merged window's when merging)
    times = [1, 3, 8, 12, 25, 28]
    limits = {0: 2, 1: 9, 2: 27, 3: 100}
    with make_pipeline() as p:
        side = (p | "Side" >> beam.Create([TV(lim, i * 10 + 1) for i, lim in limits.items()])
                | "WSide" >> beam.WindowInto(window.FixedWindows(10)))
        out = (p | "Main" >> beam.Create([TV(("k", t), t) for t in times])
               | "WMain" >> beam.WindowInto(window.Sessions(5))
               | beam.CombinePerKey(CappedSumFn(), pvalue.AsSingleton(side))
               | beam.Map(with_window))
        expected = []
        for start, end, ts in sessions_of(times, 5):
            limit = limits[int((end * US - 1) // (10 * US))]
            expected.append(("k", (sum(t for t in ts if t < limit), calls_with(limit)),
                             float(start), float(end), end * US - 1))
        assert_that(out, equal_to(expected))


def test_output_timestamps_follow_the_timestamp_combiner(make_pipeline):
    # Beam stamps a side-input combine's output at the window end whatever the combiner (its
    # partial accumulators are emitted there); headrace as a combine without side inputs
    data = [("a", 1, 3), ("a", 2, 7), ("a", 3, 14), ("b", 4, 5)]
    with make_pipeline() as p:
        limit = p | "Limit" >> beam.Create([100])
        out = (p | beam.Create([TV((k, v), t) for k, v, t in data])
               | beam.WindowInto(window.FixedWindows(10),
                                 timestamp_combiner=window.TimestampCombiner.OUTPUT_AT_EARLIEST)
               | beam.CombinePerKey(lambda vs, cap: min(sum(vs), cap), pvalue.AsSingleton(limit))
               | beam.Map(with_window))
        earliest = {}
        for k, v, t in data:
            key = (k, t // 10)
            s, first = earliest.get(key, (0, t))
            earliest[key] = (s + v, min(first, t))
        assert_that(out, equal_to([(k, s, i * 10.0, i * 10.0 + 10, first * US)
                                   for (k, i), (s, first) in earliest.items()]))


def test_callable_with_side_inputs(make_pipeline):
    values = [3, 9, 14, 2, 30]
    with make_pipeline(bundle_size=2) as p:
        cap = p | "Cap" >> beam.Create([40])
        floor = p | "Floor" >> beam.Create([7])
        per_key = (p | "Pairs" >> beam.Create([(v % 2, v) for v in values])
                   | beam.CombinePerKey(lambda vs, cap: min(sum(vs), cap), pvalue.AsSingleton(cap)))
        odd, even = [v for v in values if v % 2], [v for v in values if not v % 2]
        assert_that(per_key, equal_to([(1, min(sum(odd), 40)), (0, min(sum(even), 40))]),
                    label="per_key")
        total = (p | "Values" >> beam.Create(values)
                 | "Total" >> beam.CombineGlobally(lambda vs, cap: min(sum(vs), cap),
                                                   cap=pvalue.AsSingleton(cap)))
        assert_that(total, equal_to([min(sum(values), 40)]), label="total")
        # the default of empty input is computed with the side input's value too (Beam passes
        # the AsSingleton object itself there)
        default = (p | "Empty" >> beam.Create([])
                   | "Highest" >> beam.CombineGlobally(lambda vs, lo: max([lo, *vs]),
                                                       pvalue.AsSingleton(floor)))
        assert_that(default, equal_to([7]), label="default")


def test_combine_values_with_a_side_input(make_pipeline):
    with make_pipeline() as p:
        limit = p | "Limit" >> beam.Create([11])
        out = (p | beam.Create(PAIRS) | beam.GroupByKey()
               | beam.CombineValues(CappedSumFn(), pvalue.AsSingleton(limit)))
        assert_that(out, equal_to([(k, (s, calls_with(11))) for k, s in capped_sums(PAIRS, 11).items()]))


class CountAndSumFn(beam.CombineFn):
    """(number of inputs, sum of inputs * scale)."""

    def create_accumulator(self, scale):
        return (0, 0)

    def add_input(self, acc, x, scale):
        return (acc[0] + 1, acc[1] + x * scale)

    def merge_accumulators(self, accumulators, scale):
        accumulators = list(accumulators)
        return (sum(a[0] for a in accumulators), sum(a[1] for a in accumulators))

    def extract_output(self, acc, scale):
        return acc


def test_a_count_trigger_counts_elements(make_pipeline):
    # Beam's lifted side-input combine shows its data-driven triggers partial accumulators, so
    # AfterCount(2) may never fire; here it fires every two elements, as without side inputs
    values = [5, 1, 4, 2, 6, 3]
    with make_pipeline(bundle_size=2) as p:
        scale = p | "Scale" >> beam.Create([10])
        out = (p | beam.Create([("k", v) for v in values])
               | beam.WindowInto(window.GlobalWindows(), trigger=trigger.Repeatedly(trigger.AfterCount(2)),
                                 accumulation_mode=trigger.AccumulationMode.DISCARDING)
               | beam.CombinePerKey(CountAndSumFn(), pvalue.AsSingleton(scale))
               | beam.Values())

        # ... and when the global window expires at the end of the input, its final pane is
        # ON_TIME and OnTimeBehavior.FIRE_ALWAYS emits it empty (Beam Java's rule, see
        # docs/semantics.md, Panes): (0, 0)
        def check(panes):
            assert sorted(n for n, _ in panes) == [0] + [2] * (len(values) // 2), panes
            assert sum(s for _, s in panes) == 10 * sum(values), panes
        assert_that(out, check)


def test_combine_after_read_and_map_is_not_vectorised_away(make_pipeline, tmp_path):
    # ReadFromParquet -> Map -> CombinePerKey is the Spark runner's columnar / vectorised shape;
    # with a side input the combine must still read it
    rows = [(k, v) for k in "xyz" for v in range(0, 300, 7)]
    pq.write_table(pa.table({"key": [k for k, _ in rows], "value": [v for _, v in rows]}),
                   tmp_path / "part.parquet", row_group_size=40)
    with make_pipeline() as p:
        cap = p | "Cap" >> beam.Create([500])
        out = (p | beam.io.ReadFromParquet(str(tmp_path / "*.parquet"))
               | beam.Map(lambda r: (r["key"], r["value"]))
               | beam.CombinePerKey(lambda vs, cap: min(sum(vs), cap), pvalue.AsSingleton(cap)))
        sums = collections.defaultdict(int)
        for k, v in rows:
            sums[k] += v
        assert_that(out, equal_to([(k, min(s, 500)) for k, s in sums.items()]))


def test_a_pane_waits_for_its_side_input_window(make_pipeline):
    # the main input completes window [0, 10) before the side input has its element for it:
    # the pane is combined only once the side input's watermark passes the window
    stream = (TestStream()
              .add_elements([TV(("k", 1), 1), TV(("k", 2), 2), TV(("j", 5), 3)], tag="main")
              .advance_watermark_to(20, tag="main")
              .add_elements([TV(2, 5)], tag="side")
              .advance_watermark_to(20, tag="side"))
    with make_pipeline() as p:
        outs = p | stream
        side = outs["side"] | "WSide" >> beam.WindowInto(window.FixedWindows(10))
        out = (outs["main"] | "WMain" >> beam.WindowInto(window.FixedWindows(10))
               | beam.CombinePerKey(lambda vs, cap: min(sum(vs), cap), pvalue.AsSingleton(side))
               | beam.Map(with_window))
        assert_that(out, equal_to([("k", min(1 + 2, 2), 0.0, 10.0, 10 * US - 1),
                                   ("j", min(5, 2), 0.0, 10.0, 10 * US - 1)]))


class PaneRecord(beam.DoFn):
    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam, retraction=beam.DoFn.RetractionParam):
        yield (kv[0], kv[1], float(w.start), ts.micros, pane.timing.name, pane.index, retraction)


@pytest.mark.parametrize("mode", [trigger.AccumulationMode.ACCUMULATING,
                                  trigger.AccumulationMode.ACCUMULATING_AND_RETRACTING])
def test_early_panes_and_retractions_match_a_combine_with_the_value_as_a_constant(make_pipeline, mode):
    # the same panes (values, timestamps, timing, retractions) as CombinePerKey(fn, 3)
    stream = (TestStream()
              .add_elements([TV(("k", 4), 1)])
              .add_elements([TV(("k", 1), 2), TV(("j", 2), 3)])
              .advance_watermark_to(5)
              .add_elements([TV(("k", 6), 4)])
              .advance_watermark_to(30))
    with make_pipeline() as p:
        factor = p | "Factor" >> beam.Create([3])
        windowed = (p | stream
                    | beam.WindowInto(window.FixedWindows(10),
                                      trigger=trigger.AfterWatermark(early=trigger.AfterCount(1)),
                                      accumulation_mode=mode))
        fn = CountAndSumFn()
        with_side = (windowed | "WithSide" >> beam.CombinePerKey(fn, pvalue.AsSingleton(factor))
                     | "RecordSide" >> beam.ParDo(PaneRecord()))
        reference = (windowed | "WithConstant" >> beam.CombinePerKey(fn, 3)
                     | "RecordConstant" >> beam.ParDo(PaneRecord()))

        def same_as_reference(actual):
            joined = {"side": [], "constant": []}
            for tag, rec in actual:
                joined[tag].append(rec)
            assert sorted(joined["side"]) == sorted(joined["constant"]), joined
            assert len(joined["side"]) >= 4, joined  # early panes did fire
        tagged = ((with_side | "TagSide" >> beam.Map(lambda r: ("side", r)),
                   reference | "TagConstant" >> beam.Map(lambda r: ("constant", r)))
                  | beam.Flatten())
        assert_that(tagged, same_as_reference)


def test_an_empty_singleton_side_input_fails_naming_the_step(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    empty = p | "Empty" >> beam.Create([])
    (p | beam.Create([("a", 1)])
     | "CappedSum" >> beam.CombinePerKey(lambda vs, cap: min(sum(vs), cap), pvalue.AsSingleton(empty)))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    message = str(info.value)
    assert "CappedSum" in message and "EmptySideInput" in message and "default_value" in message


def test_as_singleton_view_with_side_inputs_needs_without_defaults():
    p = beam.Pipeline()
    limit = p | "Limit" >> beam.Create([3])
    values = p | "Values" >> beam.Create([1, 2])
    with pytest.raises(PipelineConstructionError) as info:
        values | "Capped" >> beam.CombineGlobally(lambda vs, cap: min(sum(vs), cap),
                                                  pvalue.AsSingleton(limit)).as_singleton_view()
    assert "Capped" in str(info.value) and "without_defaults" in str(info.value)


def test_as_singleton_view_without_defaults_with_a_side_input(make_pipeline):
    with make_pipeline() as p:
        limit = p | "Limit" >> beam.Create([4])
        view = (p | "Values" >> beam.Create([1, 2, 3])
                | "Capped" >> beam.CombineGlobally(lambda vs, cap: min(sum(vs), cap),
                                                   pvalue.AsSingleton(limit)).without_defaults()
                .as_singleton_view())
        out = p | "Main" >> beam.Create(["x"]) | beam.Map(lambda x, v: (x, v), view)
        assert_that(out, equal_to([("x", min(1 + 2 + 3, 4))]))
