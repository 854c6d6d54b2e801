"""Side inputs with Beam's windowed semantics.

A main-input element in window W reads the side input's window that W maps to (for a
windowed side input: the side window containing W's max timestamp; for a global-window side
input: the global window). Views: AsSingleton, AsIter, AsList, AsDict.
"""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace import pvalue
from headrace.errors import PipelineExecutionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window

TV = beam.TimestampedValue


def test_as_singleton(make_pipeline):
    with make_pipeline() as p:
        side = p | "Side" >> beam.Create([7])
        out = p | beam.Create([1, 2, 3]) | beam.Map(lambda x, s: x * s, pvalue.AsSingleton(side))
        assert_that(out, equal_to([7, 14, 21]))


def test_as_singleton_as_keyword_argument(make_pipeline):
    with make_pipeline() as p:
        side = p | "Side" >> beam.Create(["!"])
        out = p | beam.Create(["a", "b"]) | beam.Map(lambda x, suffix="": x + suffix,
                                                     suffix=pvalue.AsSingleton(side))
        assert_that(out, equal_to(["a!", "b!"]))


def test_as_singleton_default_value_for_empty_side_input(make_pipeline):
    with make_pipeline() as p:
        empty = p | "Empty" >> beam.Create([])
        out = p | beam.Create([1, 2]) | beam.Map(lambda x, s: (x, s),
                                                 pvalue.AsSingleton(empty, default_value="dflt"))
        assert_that(out, equal_to([(1, "dflt"), (2, "dflt")]))


def test_as_singleton_of_empty_without_default_reads_empty_side_input(make_pipeline):
    # As in Beam (pvalue.AsSingleton._from_runtime_iterable): no error, the function gets an
    # EmptySideInput instance in place of the value, per window of the main input.
    # (Until this was changed headrace raised a ValueError here.)
    with make_pipeline() as p:
        empty = p | "Empty" >> beam.Create([])
        out = p | beam.Create([1]) | "ReadSide" >> beam.Map(
            lambda x, s: (x, type(s).__name__, isinstance(s, pvalue.EmptySideInput)),
            pvalue.AsSingleton(empty))
        assert_that(out, equal_to([(1, "EmptySideInput", True)]), label="global")
        side = (p | "Side" >> beam.Create([TV("side", 5)])
                | "WSide" >> beam.WindowInto(window.FixedWindows(10)))
        windowed = (p | "Main" >> beam.Create([TV(3, 3), TV(15, 15)])
                    | "WMain" >> beam.WindowInto(window.FixedWindows(10))
                    | "ReadWindowed" >> beam.Map(
                        lambda x, s: (x, s if isinstance(s, str) else type(s).__name__),
                        pvalue.AsSingleton(side)))
        # [10, 20) has no side element: only that window reads EmptySideInput
        assert_that(windowed, equal_to([(3, "side"), (15, "EmptySideInput")]), label="windowed")


def test_code_failing_on_an_empty_singleton_names_the_step_and_the_side_input(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    empty = p | "Empty" >> beam.Create([])
    p | beam.Create([1]) | "ReadSide" >> beam.Map(lambda x, s: x + s, pvalue.AsSingleton(empty))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    message = str(info.value)
    assert "ReadSide" in message and "TypeError" in message
    assert "AsSingleton(Empty)" in message and "default_value" in message


def test_as_singleton_of_many_elements_fails(make_pipeline):
    p = make_pipeline(max_bundle_attempts=1)
    many = p | "Many" >> beam.Create([1, 2])
    p | beam.Create([1]) | "ReadSide" >> beam.Map(lambda x, s: (x, s), pvalue.AsSingleton(many))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "ReadSide" in str(info.value)


def test_as_iter_as_list_as_dict(make_pipeline):
    side_values = [3, 1, 2]
    side_pairs = [("a", 1), ("b", 2)]
    with make_pipeline() as p:
        side = p | "Side" >> beam.Create(side_values)
        pairs = p | "Pairs" >> beam.Create(side_pairs)
        main = p | "Main" >> beam.Create(["x", "y"])
        it = main | "Iter" >> beam.Map(lambda x, s: (x, sorted(s), sorted(s)), pvalue.AsIter(side))
        assert_that(it, equal_to([(x, sorted(side_values), sorted(side_values)) for x in "xy"]),
                    label="iter_reiterable")
        lst = main | "List" >> beam.Map(lambda x, s: (x, type(s) is list, sorted(s)), pvalue.AsList(side))
        assert_that(lst, equal_to([(x, True, sorted(side_values)) for x in "xy"]), label="list")
        dct = main | "Dict" >> beam.Map(lambda x, d: (x, d), pvalue.AsDict(pairs))
        assert_that(dct, equal_to([(x, dict(side_pairs)) for x in "xy"]), label="dict")


def test_side_input_computed_by_a_grouping_is_complete(make_pipeline):
    # the main input must wait until the side input (behind a GroupByKey) is fully computed
    pairs = [(f"k{i % 3}", i) for i in range(60)]
    totals = collections.defaultdict(int)
    for k, v in pairs:
        totals[k] += v
    with make_pipeline(bundle_size=4) as p:
        side = p | "Side" >> beam.Create(pairs) | beam.CombinePerKey(sum)
        out = (p | "Main" >> beam.Create(sorted(totals))
               | beam.Map(lambda k, d: (k, d[k]), pvalue.AsDict(side)))
        assert_that(out, equal_to(list(totals.items())))


def test_side_input_in_dofn_process(make_pipeline):
    class Scale(beam.DoFn):
        def process(self, element, factors, offset=0):
            for f in factors:
                yield element * f + offset

    with make_pipeline() as p:
        factors = p | "F" >> beam.Create([1, 10])
        offset = p | "O" >> beam.Create([5])
        out = (p | beam.Create([1, 2])
               | beam.ParDo(Scale(), pvalue.AsList(factors), offset=pvalue.AsSingleton(offset)))
        assert_that(out, equal_to([x * f + 5 for x in [1, 2] for f in [1, 10]]))


def test_windowed_side_input_is_read_per_matching_window(make_pipeline):
    main_data = [("a", 10), ("b", 70), ("c", 130), ("d", 59)]
    side_data = [(1, 5), (2, 50), (3, 65), (4, 200), (5, 119)]
    with make_pipeline(bundle_size=2) as p:
        main = (p | "Main" >> beam.Create([TV(v, t) for v, t in main_data])
                | "WMain" >> beam.WindowInto(window.FixedWindows(60)))
        side = (p | "Side" >> beam.Create([TV(v, t) for v, t in side_data])
                | "WSide" >> beam.WindowInto(window.FixedWindows(60)))
        out = main | beam.Map(lambda x, s: (x, sorted(s)), pvalue.AsList(side))
        expected = [(v, sorted(sv for sv, st in side_data if st // 60 == t // 60))
                    for v, t in main_data]
        assert_that(out, equal_to(expected))


def test_windowed_side_input_singleton_per_window(make_pipeline):
    # a per-window total used as a singleton side input: each element divides by its window's total
    data = [(1, 1), (3, 2), (2, 61), (6, 62), (4, 63)]
    totals = collections.defaultdict(int)
    for v, t in data:
        totals[t // 60] += v
    with make_pipeline() as p:
        pc = (p | beam.Create([TV(v, t) for v, t in data])
              | beam.WindowInto(window.FixedWindows(60)))
        total = pc | beam.CombineGlobally(sum).without_defaults()
        out = pc | beam.Map(lambda v, tot: (v, tot), pvalue.AsSingleton(total))
        assert_that(out, equal_to([(v, totals[t // 60]) for v, t in data]))


def test_global_window_side_input_is_seen_by_every_main_window(make_pipeline):
    main_data = [("a", 10), ("b", 70), ("c", 1000)]
    side_values = [1, 2, 3]
    with make_pipeline() as p:
        main = (p | "Main" >> beam.Create([TV(v, t) for v, t in main_data])
                | beam.WindowInto(window.FixedWindows(60)))
        side = p | "Side" >> beam.Create(side_values)
        out = main | beam.Map(lambda x, s, w=beam.DoFn.WindowParam: (x, int(w.start), sorted(s)),
                              pvalue.AsList(side))
        assert_that(out, equal_to([(v, t - t % 60, side_values) for v, t in main_data]))


def test_sliding_main_reads_fixed_side_by_window_end(make_pipeline):
    # each main window [s, s+120) reads the side window containing its max timestamp
    with make_pipeline() as p:
        main = (p | "Main" >> beam.Create([TV("x", 90)])
                | "WMain" >> beam.WindowInto(window.SlidingWindows(120, 60)))
        side_data = [(1, 10), (2, 70), (3, 130), (4, 170)]
        side = (p | "Side" >> beam.Create([TV(v, t) for v, t in side_data])
                | "WSide" >> beam.WindowInto(window.FixedWindows(60)))
        out = main | beam.Map(lambda x, s, w=beam.DoFn.WindowParam: (x, int(w.start), sorted(s)),
                              pvalue.AsList(side))
        expected = []
        for start in (0, 60):  # the two sliding windows holding t=90
            side_window = (start + 120 - 1) // 60  # the fixed window holding the max timestamp
            expected.append(("x", start, sorted(v for v, t in side_data if t // 60 == side_window)))
        assert_that(out, equal_to(expected))


def test_a_sliding_side_input_is_read_in_the_earliest_window_holding_the_main_windows_end(make_pipeline):
    # Beam's mapping (Java's SlidingWindows.getDefaultWindowMappingFn, Python's map_via_end):
    # of the sliding side windows holding the main window's max timestamp, the earliest; a
    # main window [0, 60) reads the side window [-60, 60), [60, 120) reads [0, 120)
    with make_pipeline() as p:
        main = (p | "Main" >> beam.Create([TV("a", 30), TV("b", 90)])
                | "WMain" >> beam.WindowInto(window.FixedWindows(60)))
        side_data = [(1, -30), (2, 10), (3, 70), (4, 100)]
        side = (p | "Side" >> beam.Create([TV(v, t) for v, t in side_data])
                | "WSide" >> beam.WindowInto(window.SlidingWindows(120, 60)))
        out = main | beam.Map(lambda x, s: (x, sorted(s)), pvalue.AsList(side))
        assert_that(out, equal_to([("a", [1, 2]), ("b", [2, 3, 4])]))


def test_combine_globally_as_singleton_view(make_pipeline):
    with make_pipeline() as p:
        total = p | "Side" >> beam.Create([3, 4]) | beam.CombineGlobally(sum).as_singleton_view()
        out = p | beam.Create([1, 2]) | beam.Map(lambda x, t: x + t, total)
        assert_that(out, equal_to([1 + 7, 2 + 7]))


def test_combine_globally_as_singleton_view_of_empty_input_reads_the_default(make_pipeline):
    with make_pipeline() as p:
        total = p | "Side" >> beam.Create([]) | beam.CombineGlobally(sum).as_singleton_view()
        out = p | beam.Create([1, 2]) | beam.Map(lambda x, t: (x, t), total)
        assert_that(out, equal_to([(1, 0), (2, 0)]))
