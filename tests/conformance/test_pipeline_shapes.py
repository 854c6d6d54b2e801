"""Pipeline shapes that stress a runner's scheduling: groupings feeding groupings, side inputs
computed from groupings, re-windowing chains, joins of grouped outputs. Every element must
arrive exactly once and nothing may be dropped as late in a bounded pipeline.
"""

from __future__ import annotations

import collections

import headrace as beam
from headrace import pvalue
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window

TV = beam.TimestampedValue

PAIRS = [(f"k{i % 3}", i) for i in range(12)]


def _sums(pairs):
    out = collections.Counter()
    for k, v in pairs:
        out[k] += v
    return dict(out)


def test_main_and_side_input_both_from_a_grouping(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline(bundle_size=2) as p:
        grouped = p | beam.Create(PAIRS) | beam.CombinePerKey(sum)
        total = grouped | "Values" >> beam.Values() | "Total" >> beam.CombineGlobally(sum)
        out = grouped | beam.Map(lambda kv, tot: (kv[0], kv[1], tot), pvalue.AsSingleton(total))
        assert_that(out, equal_to([(k, v, sum(sums.values())) for k, v in sums.items()]))


def test_reshuffles_around_groupings(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create(PAIRS) | "Sum" >> beam.CombinePerKey(sum)
               | "R1" >> beam.Reshuffle() | "Group" >> beam.GroupByKey()
               | "R2" >> beam.Reshuffle() | "R3" >> beam.Reshuffle())
        assert_that(out, equal_to([(k, [v]) for k, v in sums.items()]))


def test_flatten_of_sources_into_grouping(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline() as p:
        a = p | "A" >> beam.Create(PAIRS)
        b = p | "B" >> beam.Create(PAIRS)
        out = (a, b) | beam.Flatten() | beam.CombinePerKey(sum)
        assert_that(out, equal_to([(k, 2 * v) for k, v in sums.items()]))


def test_chain_of_rewindowed_groupings(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline(bundle_size=1) as p:
        out = (p | beam.Create([TV(kv, kv[1]) for kv in PAIRS])
               | "W4" >> beam.WindowInto(window.FixedWindows(4))
               | "C4" >> beam.CombinePerKey(sum)
               | "W8" >> beam.WindowInto(window.FixedWindows(8))
               | "C8" >> beam.CombinePerKey(sum)
               | "WG" >> beam.WindowInto(window.GlobalWindows())
               | "CG" >> beam.CombinePerKey(sum))
        assert_that(out, equal_to(list(sums.items())))


def test_join_of_two_groupings_of_the_same_input(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline() as p:
        pc = p | beam.Create(PAIRS)
        s1 = pc | "S1" >> beam.CombinePerKey(sum)
        s2 = pc | "S2" >> beam.GroupByKey() | beam.MapTuple(lambda k, vs: (k, sum(vs)))
        out = {"a": s1, "b": s2} | beam.CoGroupByKey()
        assert_that(out, equal_to([(k, {"a": [v], "b": [v]}) for k, v in sums.items()]))


def test_chained_side_inputs_from_a_grouping(make_pipeline):
    sums = _sums(PAIRS)
    with make_pipeline(bundle_size=1) as p:
        grouped = p | beam.Create(PAIRS) | beam.CombinePerKey(sum)
        keys = grouped | "Keys" >> beam.Keys()
        out = (grouped
               | "WithKeys" >> beam.Map(lambda kv, ks: (kv[0], sorted(ks)), pvalue.AsList(keys))
               | "Lookup" >> beam.Map(lambda kv, d: (kv[0], kv[1], d[kv[0]]), pvalue.AsDict(grouped)))
        assert_that(out, equal_to([(k, sorted(sums), v) for k, v in sums.items()]))


def test_windowed_side_input_from_the_same_source_as_a_grouped_main(make_pipeline):
    with make_pipeline(bundle_size=3) as p:
        pc = (p | beam.Create([TV(("k", i), i * 10) for i in range(10)])
              | beam.WindowInto(window.FixedWindows(10)))
        total = pc | "Values" >> beam.Values() | beam.CombineGlobally(sum).without_defaults()
        out = pc | beam.GroupByKey() | beam.Map(lambda kv, s: (kv[1], s), pvalue.AsSingleton(total))
        assert_that(out, equal_to([([i], i) for i in range(10)]))


def test_fixed_window_outputs_regrouped_into_sessions(make_pipeline):
    # per-window sums are stamped at their window's end - 1us: 9.999999, 19.999999, ...;
    # sessions with an 11 s gap chain them all together
    with make_pipeline() as p:
        out = (p | beam.Create([TV(("k", i), i * 10) for i in range(5)])
               | "Fixed" >> beam.WindowInto(window.FixedWindows(10))
               | "Sum" >> beam.CombinePerKey(sum)
               | "Sessions" >> beam.WindowInto(window.Sessions(11))
               | "Group" >> beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(out, equal_to([("k", list(range(5)))]))
