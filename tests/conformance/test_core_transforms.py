"""Core transforms: element-wise steps, DoFn lifecycle and parameters, grouping, multi-output.

Expected outputs are computed with plain Python from the inputs.
"""

from __future__ import annotations

import collections
import math
import re

import pytest

import headrace as beam
from headrace import pvalue
from headrace.metrics.metric import MetricsFilter
from headrace.testing.util import assert_that, equal_to, is_empty
from headrace.transforms import window
from tests._support import counter_value, new_instance_id

TV = beam.TimestampedValue


# ---------------------------------------------------------------------------------------
# Create and the Map family


def test_create_yields_exactly_its_values(make_pipeline):
    values = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5]
    with make_pipeline(bundle_size=4) as p:
        assert_that(p | beam.Create(values), equal_to(list(values)))


def test_create_of_empty_list_is_empty(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | beam.Create([]), is_empty())


def test_create_of_dict_yields_its_items(make_pipeline):
    d = {"a": 1, "b": 2, "c": 3}
    with make_pipeline() as p:
        assert_that(p | beam.Create(d), equal_to(list(d.items())))


def test_map(make_pipeline):
    values = list(range(-5, 20))
    with make_pipeline(bundle_size=3) as p:
        out = p | beam.Create(values) | beam.Map(lambda x: x * x - 1)
        assert_that(out, equal_to([x * x - 1 for x in values]))


def test_map_with_extra_positional_and_keyword_args(make_pipeline):
    values = [1, 2, 3]
    with make_pipeline() as p:
        out = p | beam.Create(values) | beam.Map(lambda x, a, b=0: x * a + b, 10, b=7)
        assert_that(out, equal_to([x * 10 + 7 for x in values]))


def test_maptuple(make_pipeline):
    pairs = [("a", 1), ("b", 2), ("c", 3)]
    with make_pipeline() as p:
        out = p | beam.Create(pairs) | beam.MapTuple(lambda k, v: f"{k}={v * 2}")
        assert_that(out, equal_to([f"{k}={v * 2}" for k, v in pairs]))


def test_flatmap(make_pipeline):
    lines = ["the quick brown fox", "", "jumps over", "the lazy dog"]
    with make_pipeline(bundle_size=2) as p:
        out = p | beam.Create(lines) | beam.FlatMap(str.split)
        assert_that(out, equal_to([w for line in lines for w in line.split()]))


def test_flatmap_with_generator(make_pipeline):
    def upto(n):
        for i in range(n):
            yield (n, i)

    with make_pipeline() as p:
        out = p | beam.Create([0, 1, 3]) | beam.FlatMap(upto)
        assert_that(out, equal_to([(n, i) for n in [0, 1, 3] for i in range(n)]))


def test_flatmaptuple(make_pipeline):
    pairs = [("x", 3), ("y", 0), ("z", 2)]
    with make_pipeline() as p:
        out = p | beam.Create(pairs) | beam.FlatMapTuple(lambda k, n: [k] * n)
        assert_that(out, equal_to([k for k, n in pairs for _ in range(n)]))


def test_filter(make_pipeline):
    values = list(range(50))
    with make_pipeline(bundle_size=7) as p:
        out = p | beam.Create(values) | beam.Filter(lambda x: x % 3 == 0)
        assert_that(out, equal_to([x for x in values if x % 3 == 0]))


def test_map_keeps_element_timestamp_and_timestampedvalue_sets_it(make_pipeline):
    with make_pipeline() as p:
        stamped = p | beam.Create([TV(1, 10), TV(2, 20)]) | "Inc" >> beam.Map(lambda x: x + 1)
        kept = stamped | "ReadTs" >> beam.Map(lambda x, ts=beam.DoFn.TimestampParam: (x, ts.micros))
        assert_that(kept, equal_to([(2, 10_000_000), (3, 20_000_000)]), label="kept")
        moved = (stamped
                 | "Move" >> beam.Map(lambda x: TV(x, 1000 + x))
                 | "ReadTs2" >> beam.Map(lambda x, ts=beam.DoFn.TimestampParam: (x, ts.micros)))
        assert_that(moved, equal_to([(2, 1002_000_000), (3, 1003_000_000)]), label="moved")


def test_create_without_timestamps_is_at_min_timestamp_in_global_window(make_pipeline):
    with make_pipeline() as p:
        out = p | beam.Create(["a"]) | beam.Map(
            lambda x, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
            (x, ts == window.MIN_TIMESTAMP, isinstance(w, window.GlobalWindow)))
        assert_that(out, equal_to([("a", True, True)]))


# ---------------------------------------------------------------------------------------
# ParDo: lifecycle and parameters


class LifecycleDoFn(beam.DoFn):
    """Records its lifecycle both in metrics and in a journal (teardown has no metrics)."""

    def __init__(self, journal):
        self.journal = journal

    def setup(self):
        self.iid = new_instance_id()
        beam.Metrics.counter("lifecycle", "setup").inc()
        self.journal.write("setup", self.iid)

    def start_bundle(self):
        beam.Metrics.counter("lifecycle", "start_bundle").inc()
        self.journal.write("start_bundle", getattr(self, "iid", None))

    def process(self, element):
        beam.Metrics.counter("lifecycle", "process").inc()
        self.journal.write("process", getattr(self, "iid", None), element)
        yield element * 10

    def finish_bundle(self):
        beam.Metrics.counter("lifecycle", "finish_bundle").inc()
        self.journal.write("finish_bundle", getattr(self, "iid", None))

    def teardown(self):
        self.journal.write("teardown", getattr(self, "iid", None))


def test_dofn_lifecycle_methods_are_called_in_order(make_pipeline, journal):
    n, bundle_size = 11, 3
    p = make_pipeline(bundle_size=bundle_size)
    out = p | beam.Create(list(range(n))) | "Life" >> beam.ParDo(LifecycleDoFn(journal))
    assert_that(out, equal_to([x * 10 for x in range(n)]))
    result = p.run()
    result.wait_until_finish()

    # metrics: every element processed once, every bundle started and finished
    assert counter_value(result, "process") == n
    starts = counter_value(result, "start_bundle")
    assert starts >= math.ceil(n / bundle_size)
    assert counter_value(result, "finish_bundle") == starts
    assert counter_value(result, "setup") >= 1

    # journal: per instance, setup (start_bundle process* finish_bundle)* teardown
    events = journal.read()
    assert None not in {e[1] for e in events}, "a method ran before setup()"
    by_instance = collections.defaultdict(str)
    letters = {"setup": "S", "start_bundle": "B", "process": "p", "finish_bundle": "F",
               "teardown": "T"}
    for e in events:
        by_instance[e[1]] += letters[e[0]]
    assert by_instance, "no DoFn instance was used"
    for iid, seq in by_instance.items():
        assert re.fullmatch(r"S(Bp*F)*T", seq), f"instance {iid}: bad lifecycle order {seq}"
        for bundle in re.findall(r"B(p*)F", seq):
            assert len(bundle) <= bundle_size, f"a bundle had {len(bundle)} > {bundle_size} elements"
    processed = [e[2] for e in events if e[0] == "process"]
    assert sorted(processed) == list(range(n))


class CountInFinishBundle(beam.DoFn):
    """Buffers nothing but counts per bundle and emits the count from finish_bundle."""

    def start_bundle(self):
        self.count = 0

    def process(self, element):
        self.count += 1
        return []

    def finish_bundle(self):
        from headrace.utils.windowed_value import WindowedValue
        yield WindowedValue(self.count, 0, [window.GlobalWindow()])


def test_finish_bundle_can_emit_windowed_values(make_pipeline):
    n = 23
    with make_pipeline(bundle_size=5) as p:
        counts = p | beam.Create(list(range(n))) | beam.ParDo(CountInFinishBundle())
        total = counts | beam.CombineGlobally(sum)
        assert_that(total, equal_to([n]))


def test_timestamp_and_window_params(make_pipeline):
    stamps = [0, 59, 60, 61, 125.5]
    with make_pipeline() as p:
        out = (p
               | beam.Create([TV(t, t) for t in stamps])
               | beam.WindowInto(window.FixedWindows(60))
               | beam.Map(lambda x, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                          (x, ts.micros, w.start.micros, w.end.micros)))
        expected = []
        for t in stamps:
            start = int(t // 60) * 60
            expected.append((t, int(t * 1_000_000), start * 1_000_000, (start + 60) * 1_000_000))
        assert_that(out, equal_to(expected))


class PaneDoFn(beam.DoFn):
    def process(self, element, pane=beam.DoFn.PaneInfoParam):
        yield (element[0], pane.is_first, pane.is_last, pane.timing, pane.index)


def test_pane_info_param_after_group_by_key_is_single_on_time_pane(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create([("a", 1), ("a", 2), ("b", 3)])
               | beam.GroupByKey()
               | beam.ParDo(PaneDoFn()))
        # default trigger, bounded input: exactly one ON_TIME pane per key and window
        on_time = beam.PaneInfoTiming.ON_TIME
        assert_that(out, equal_to([("a", True, True, on_time, 0), ("b", True, True, on_time, 0)]))


# ---------------------------------------------------------------------------------------
# key-value helpers


def test_keys_values_kvswap(make_pipeline):
    pairs = [("a", 1), ("b", 2), ("a", 3)]
    with make_pipeline() as p:
        pc = p | beam.Create(pairs)
        assert_that(pc | beam.Keys(), equal_to([k for k, _ in pairs]), label="keys")
        assert_that(pc | beam.Values(), equal_to([v for _, v in pairs]), label="values")
        assert_that(pc | beam.KvSwap(), equal_to([(v, k) for k, v in pairs]), label="swap")


def test_with_keys_callable_and_constant(make_pipeline):
    words = ["apple", "kiwi", "banana"]
    with make_pipeline() as p:
        pc = p | beam.Create(words)
        assert_that(pc | "ByLen" >> beam.WithKeys(len), equal_to([(len(w), w) for w in words]),
                    label="callable")
        assert_that(pc | "Const" >> beam.WithKeys("k"), equal_to([("k", w) for w in words]),
                    label="constant")


# ---------------------------------------------------------------------------------------
# grouping


def _grouped(pairs):
    out = collections.defaultdict(list)
    for k, v in pairs:
        out[k].append(v)
    return {k: sorted(vs) for k, vs in out.items()}


def test_group_by_key(make_pipeline):
    pairs = [(f"k{i % 7}", i) for i in range(200)] + [(None, -1), ((1, "t"), -2), (b"b", -3)]
    with make_pipeline(bundle_size=9) as p:
        out = (p | beam.Create(pairs) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(out, equal_to(list(_grouped(pairs).items())))


def test_group_by_key_of_empty_is_empty(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | beam.Create([]) | beam.Map(lambda x: x) | beam.GroupByKey(), is_empty())


def test_group_by_key_equal_keys_group_together(make_pipeline):
    # equal tuples built separately, and -0.0 == 0.0, must land in one group
    pairs = [((1, "a"), 1), (tuple([1, "a"]), 2), (0.0, "z"), (-0.0, "y")]
    with make_pipeline() as p:
        out = (p | beam.Create(pairs) | beam.GroupByKey()
               | beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(out, equal_to([((1, "a"), [1, 2]), (0.0, ["y", "z"])]))


def test_grouping_directly_after_grouping(make_pipeline):
    # a grouping fed straight by another grouping (no step in between) must see all its input
    pairs = [(f"k{i % 4}", i) for i in range(40)]
    sums = collections.defaultdict(int)
    for k, v in pairs:
        sums[k] += v
    with make_pipeline(bundle_size=3) as p:
        pc = p | beam.Create(pairs)
        regrouped = (pc | "Sum" >> beam.CombinePerKey(sum) | "Regroup" >> beam.GroupByKey()
                     | "Unpack" >> beam.MapTuple(lambda k, vs: (k, sorted(vs))))
        assert_that(regrouped, equal_to([(k, [s]) for k, s in sums.items()]), label="gbk_after_cpk")
        twice = (pc | "Group1" >> beam.GroupByKey() | "Group2" >> beam.GroupByKey()
                 | "Unpack2" >> beam.MapTuple(lambda k, vss: (k, [sorted(vs) for vs in vss])))
        assert_that(twice, equal_to([(k, [sorted(v for kk, v in pairs if kk == k)]) for k in sums]),
                    label="gbk_after_gbk")
        counted = pc | "Keys" >> beam.Keys() | "Distinct" >> beam.Distinct() | beam.combiners.Count.Globally()
        assert_that(counted, equal_to([len(sums)]), label="count_after_distinct")


def test_grouping_after_flatten_of_groupings(make_pipeline):
    a = [("x", 1), ("y", 2), ("x", 3)]
    b = [("x", 10), ("z", 20)]
    with make_pipeline() as p:
        sa = p | "A" >> beam.Create(a) | "SumA" >> beam.CombinePerKey(sum)
        sb = p | "B" >> beam.Create(b) | "SumB" >> beam.CombinePerKey(sum)
        out = ((sa, sb) | beam.Flatten() | "Total" >> beam.CombinePerKey(sum))
        totals = collections.defaultdict(int)
        for k, v in a + b:
            totals[k] += v
        assert_that(out, equal_to(list(totals.items())))


def test_cogroupbykey_dict_input(make_pipeline):
    emails = [("amy", "amy@example.com"), ("carl", "carl@example.com"), ("amy", "amy@x.org")]
    phones = [("amy", "111"), ("james", "222"), ("carl", "333"), ("carl", "444")]
    with make_pipeline() as p:
        e = p | "Emails" >> beam.Create(emails)
        ph = p | "Phones" >> beam.Create(phones)
        out = ({"emails": e, "phones": ph} | beam.CoGroupByKey()
               | beam.MapTuple(lambda k, d: (k, sorted(d["emails"]), sorted(d["phones"]))))
        ge, gp = _grouped(emails), _grouped(phones)
        expected = [(k, ge.get(k, []), gp.get(k, [])) for k in set(ge) | set(gp)]
        assert_that(out, equal_to(expected))


def test_cogroupbykey_tuple_input(make_pipeline):
    left = [(1, "a"), (2, "b"), (1, "c")]
    right = [(2, "x"), (3, "y")]
    with make_pipeline() as p:
        lft = p | "L" >> beam.Create(left)
        rgt = p | "R" >> beam.Create(right)
        out = ((lft, rgt) | beam.CoGroupByKey()
               | beam.MapTuple(lambda k, t: (k, len(t), sorted(t[0]), sorted(t[1]))))
        gl, gr = _grouped(left), _grouped(right)
        expected = [(k, 2, gl.get(k, []), gr.get(k, [])) for k in set(gl) | set(gr)]
        assert_that(out, equal_to(expected))


# ---------------------------------------------------------------------------------------
# Flatten, Partition, Reshuffle


def test_flatten(make_pipeline):
    a, b, c = [1, 2, 3], [3, 4], []
    with make_pipeline() as p:
        pcs = (p | "A" >> beam.Create(a), p | "B" >> beam.Create(b), p | "C" >> beam.Create(c))
        assert_that(pcs | beam.Flatten(), equal_to(a + b + c))


def test_flatten_same_pcollection_twice_duplicates(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create(["x", "y"])
        assert_that((pc, pc) | beam.Flatten(), equal_to(["x", "y", "x", "y"]))


def test_partition(make_pipeline):
    values = list(range(31))
    n = 4
    with make_pipeline(bundle_size=5) as p:
        parts = p | beam.Create(values) | beam.Partition(lambda x, k: (x * 7) % k, n)
        assert len(parts) == n
        for i, part in enumerate(parts):
            assert_that(part, equal_to([x for x in values if (x * 7) % n == i]), label=f"part{i}")


def test_reshuffle_keeps_elements_timestamps_and_windows(make_pipeline):
    stamps = [1, 15, 29, 31]
    with make_pipeline(bundle_size=2) as p:
        out = (p | beam.Create([TV(f"e{t}", t) for t in stamps])
               | beam.WindowInto(window.FixedWindows(10))
               | beam.Reshuffle()
               | beam.Map(lambda x, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                          (x, ts.micros, w.start.micros)))
        assert_that(out, equal_to([(f"e{t}", t * 10**6, (t // 10) * 10 * 10**6) for t in stamps]))


# ---------------------------------------------------------------------------------------
# multiple outputs


class SplitByRemainder(beam.DoFn):
    def process(self, x):
        if x % 3 == 0:
            yield pvalue.TaggedOutput("a", x)
        elif x % 3 == 1:
            yield pvalue.TaggedOutput("b", x)
        else:
            yield x


def test_tagged_outputs_with_main(make_pipeline):
    values = list(range(20))
    with make_pipeline(bundle_size=6) as p:
        res = p | beam.Create(values) | beam.ParDo(SplitByRemainder()).with_outputs("a", "b", main="m")
        assert_that(res.m, equal_to([x for x in values if x % 3 == 2]), label="m")
        assert_that(res["a"], equal_to([x for x in values if x % 3 == 0]), label="a")
        assert_that(res.b, equal_to([x for x in values if x % 3 == 1]), label="b")


def test_tagged_outputs_unpack_main_first(make_pipeline):
    values = list(range(10))
    with make_pipeline() as p:
        main, a, b = (p | beam.Create(values)
                      | beam.ParDo(SplitByRemainder()).with_outputs("a", "b", main="m"))
        assert_that(main, equal_to([x for x in values if x % 3 == 2]), label="main")
        assert_that(a, equal_to([x for x in values if x % 3 == 0]), label="a")
        assert_that(b, equal_to([x for x in values if x % 3 == 1]), label="b")


def test_flatmap_with_outputs(make_pipeline):
    def route(x):
        yield x
        if x % 2:
            yield pvalue.TaggedOutput("odd", x)

    with make_pipeline() as p:
        res = p | beam.Create(range(6)) | beam.FlatMap(route).with_outputs("odd", main="all")
        assert_that(res.all, equal_to(list(range(6))), label="all")
        assert_that(res.odd, equal_to([1, 3, 5]), label="odd")


# ---------------------------------------------------------------------------------------
# composite transforms and labels


class CountWords(beam.PTransform):
    """A composite: split lines into words and count each word."""

    def expand(self, lines):
        return (lines
                | "Split" >> beam.FlatMap(str.split)
                | "Tally" >> beam.ParDo(_TallyDoFn())
                | "Pair" >> beam.Map(lambda w: (w, 1))
                | "Sum" >> beam.CombinePerKey(sum))


class _TallyDoFn(beam.DoFn):
    def process(self, w):
        beam.Metrics.counter("composite", "words").inc()
        yield w


def test_composite_ptransform_and_labels(make_pipeline):
    lines = ["a b a", "c a", "b"]
    p = make_pipeline()
    out = p | beam.Create(lines) | "MyCount" >> CountWords()
    assert_that(out, equal_to(list(collections.Counter(" ".join(lines).split()).items())))
    result = p.run()
    counters = result.metrics().query(MetricsFilter().with_name("words"))["counters"]
    assert [c.key.step for c in counters] == ["MyCount/Tally"]
    assert counters[0].committed == len(" ".join(lines).split())
    # steps inside a composite are found by the composite's label
    assert result.metrics().query(MetricsFilter().with_step("MyCount"))["counters"]
    assert not result.metrics().query(MetricsFilter().with_step("Other"))["counters"]


def test_unlabelled_assert_thats_get_unique_labels_as_in_beam(make_pipeline):
    # Beam's assert_that appends _2, _3, ... to a label already applied, so several unlabelled
    # assertions share a pipeline; each of them still checks its PCollection
    from headrace.testing.util import BeamAssertException
    p = make_pipeline(max_bundle_attempts=1)
    evens = p | "Evens" >> beam.Create([2, 4])
    odds = p | "Odds" >> beam.Create([1, 3])
    assert_that(evens, equal_to([2, 4]))
    assert_that(odds, equal_to([1, 3]))
    assert_that(odds, equal_to([1, 3, 5]))  # fails: the third assertion is applied too
    tops = {n.full_label.split("/")[0] for n in p.transforms()}
    assert {"assert_that", "assert_that_2", "assert_that_3"} <= tops
    with pytest.raises(Exception) as info:
        p.run()
    assert "assert_that_3" in str(info.value) and "missing elements [5]" in str(info.value)
    assert isinstance(info.value, BeamAssertException) or isinstance(
        info.value.__cause__, BeamAssertException) or "BeamAssertException" in str(info.value)


def test_ptransform_fn_composite(make_pipeline):
    @beam.ptransform_fn
    def TimesAndKeep(pcoll, factor, keep):
        return pcoll | beam.Map(lambda x: x * factor) | beam.Filter(keep)

    with make_pipeline() as p:
        out = p | beam.Create(range(10)) | TimesAndKeep(3, lambda x: x > 10)
        assert_that(out, equal_to([x * 3 for x in range(10) if x * 3 > 10]))


def test_chained_transforms_with_labels(make_pipeline):
    with make_pipeline() as p:
        both = "Inc" >> beam.Map(lambda x: x + 1) | "Dbl" >> beam.Map(lambda x: x * 2)
        out = p | beam.Create([1, 2, 3]) | both
        assert_that(out, equal_to([(x + 1) * 2 for x in [1, 2, 3]]))


@pytest.mark.parametrize("bundle_size", [1, 2, 1000])
def test_word_count_end_to_end(make_pipeline, bundle_size):
    text = ["to be or not to be", "that is the question", "to be is to do", ""]
    with make_pipeline(bundle_size=bundle_size) as p:
        out = (p | beam.Create(text)
               | beam.FlatMap(str.split)
               | beam.Map(lambda w: (w, 1))
               | beam.GroupByKey()
               | beam.MapTuple(lambda w, ones: (w, sum(ones))))
        assert_that(out, equal_to(list(collections.Counter(" ".join(text).split()).items())))


def test_grouping_directly_after_grouping_keeps_every_element(make_pipeline):
    data = [("a", 1), ("a", 2), ("b", 3)]
    sums = collections.Counter()
    for k, v in data:
        sums[k] += v
    with make_pipeline(bundle_size=1) as p:
        pc = p | beam.Create(data)
        twice = (pc | "G1" >> beam.GroupByKey() | "G2" >> beam.GroupByKey()
                 | beam.MapTuple(lambda k, groups: (k, sorted(v for g in groups for v in g))))
        combined = pc | "C1" >> beam.CombinePerKey(sum) | "C2" >> beam.CombinePerKey(sum)
        assert_that(twice, equal_to([(k, sorted(v for kk, v in data if kk == k)) for k in sums]),
                    label="twice")
        assert_that(combined, equal_to(list(sums.items())), label="combined")


def test_failing_combine_fn_names_the_step(make_pipeline):
    from headrace.errors import PipelineExecutionError

    class BadFn(beam.CombineFn):
        def create_accumulator(self):
            return 0

        def add_input(self, acc, x):
            return acc + 1 / x

        def merge_accumulators(self, accs):
            return sum(accs)

        def extract_output(self, acc):
            return acc

    with pytest.raises(PipelineExecutionError, match="MyCombine"):
        with make_pipeline() as p:
            _ = p | beam.Create([("a", 1), ("a", 0)]) | "MyCombine" >> beam.CombinePerKey(BadFn())


def test_flatten_of_no_inputs_with_pipeline_argument_is_empty(make_pipeline):
    with make_pipeline() as p:
        assert_that(() | beam.Flatten(pipeline=p), is_empty())
