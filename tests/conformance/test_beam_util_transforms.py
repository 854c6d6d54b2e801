"""Beam's `transforms.util` names on every runner: BatchElements, Regex, ToString, LogElements,
Reify, WithKeys, Tee, Distinct, Keys, Values, KvSwap, Reshuffle(num_buckets=).

Expected values are computed with plain Python (`re`, `str`, sorted) from the inputs.
"""

from __future__ import annotations

import collections
import logging
import re

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, UnsupportedArgumentError
from headrace.model.time import Timestamp
from headrace.model.window import GlobalWindow, IntervalWindow
from headrace.testing import util as test_util
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import util, window

TV = beam.TimestampedValue


# ---------------------------------------------------------------------------------------
# BatchElements


def _sizes_and_contents(batches):
    return sorted(len(b) for b in batches), sorted(x for b in batches for x in b)


def test_batch_elements_honours_min_and_max_and_keeps_every_element(make_pipeline):
    values = list(range(103))
    with make_pipeline(bundle_size=40) as p:
        batches = p | beam.Create(values) | util.BatchElements(min_batch_size=5, max_batch_size=9)

        def check(actual):
            sizes = [len(b) for b in actual]
            assert sorted(x for b in actual for x in b) == values
            # every batch within max; below min only as the last batch of a bundle
            assert max(sizes) <= 9, sizes
            assert sum(1 for s in sizes if s < 5) <= 3, sizes  # 103 elements: at most 3 bundles
        assert_that(batches, check)


def test_batch_elements_with_equal_min_and_max_gives_fixed_size_batches(make_pipeline):
    values = list(range(60))
    with make_pipeline(bundle_size=30) as p:
        batches = p | beam.Create(values) | util.BatchElements(min_batch_size=6, max_batch_size=6)
        assert_that(batches | beam.Map(len), equal_to([6] * 10))


def test_batch_elements_never_spans_windows_and_emits_at_the_end_of_the_window(make_pipeline):
    data = [TV(i, i) for i in range(30)]  # fixed windows of 10 s: 10 elements each
    with make_pipeline(bundle_size=30) as p:
        batches = (p | beam.Create(data) | beam.WindowInto(window.FixedWindows(10))
                   | util.BatchElements(min_batch_size=4, max_batch_size=4))
        out = batches | beam.Map(lambda b, w=beam.DoFn.WindowParam, t=beam.DoFn.TimestampParam:
                                 (int(w.start), sorted(b), t.micros))
        expected_values = collections.defaultdict(list)
        for i in range(30):
            expected_values[i // 10 * 10].append(i)

        def check(actual):
            by_window = collections.defaultdict(list)
            for start, batch, ts in actual:
                assert all(start <= x < start + 10 for x in batch), (start, batch)
                assert ts == (start + 10) * 1_000_000 - 1  # the window's max timestamp
                assert len(batch) <= 4
                by_window[start].extend(batch)
            assert {k: sorted(v) for k, v in by_window.items()} == dict(expected_values)
        assert_that(out, check)


def test_batch_elements_element_size_fn_counts_towards_the_batch_size(make_pipeline):
    words = ["a" * n for n in (1, 2, 3, 4, 5, 1, 1, 2, 6, 3)]
    with make_pipeline(bundle_size=100) as p:
        batches = p | beam.Create(words) | util.BatchElements(
            min_batch_size=6, max_batch_size=6, element_size_fn=len)

        def check(actual):
            assert sorted(w for b in actual for w in b) == sorted(words)
            # each batch's total size stays within 6 unless one element alone is larger
            for b in actual:
                assert sum(map(len, b)) <= 6 or len(b) == 1, b
        assert_that(batches, check)


@pytest.mark.parametrize("kwargs", [
    dict(min_batch_size=5, max_batch_size=4),
    dict(min_batch_size=0),
    dict(target_batch_overhead=1.5),
    dict(target_batch_duration_secs=-1),
    dict(target_batch_overhead=None, target_batch_duration_secs=None),
    dict(bucket_boundaries=[10, 20]),
    dict(length_fn=len, bucket_boundaries=[20, 10]),
])
def test_batch_elements_rejects_bad_arguments_as_beam_does(kwargs):
    with pytest.raises(ValueError):  # InvalidArgumentError is a ValueError, as Beam raises
        util.BatchElements(**kwargs)


def test_batch_elements_refuses_stateful_batching():
    with pytest.raises(UnsupportedArgumentError, match="max_batch_duration_secs"):
        util.BatchElements(max_batch_duration_secs=0.01)


def test_batch_sizer_grows_towards_its_targets_within_bounds():
    sizer = util._BatchSizer(2, 50, 0.05, 10, None)
    assert sizer.next_size() == 2
    sizer.record(2, 0.002)
    assert sizer.next_size() == 4  # twice the minimum before there is a line to fit
    for size in (4, 8, 16, 32, 50):  # each batch costs 1 ms fixed + 0.1 ms per element
        sizer.record(size, 0.001 + 0.0001 * size)
    # overhead 5 %: a / (a + b x) = 0.05 -> x = (a / b) * 19 = 190, capped at max 50
    assert sizer.next_size() == 50
    slow = util._BatchSizer(1, 1000, None, 0.01, None)
    for size in (1, 2, 4, 8):  # 1 ms per element: a 10 ms target means 10 elements
        slow.record(size, 0.001 * size)
    assert slow.next_size() in (10, 11)  # 10, give or take the alternating jitter of 1 bound


# ---------------------------------------------------------------------------------------
# Regex


LINES = ["aj", "xj", "yj", "zj", "key1:value1", "a1b2c3", "", "abc def  ghi"]


def test_regex_matches_and_all_matches(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create(LINES)
        assert_that(pc | "m" >> util.Regex.matches("[xyz]"),
                    equal_to([s[0] for s in LINES if re.match("[xyz]", s)]), label="m")
        assert_that(pc | "mg" >> util.Regex.matches(r"(?P<k>\w+):(\w+)", group="k"),
                    equal_to(["key1"]), label="mg")
        assert_that(pc | "am" >> util.Regex.all_matches(r"(\w+):(\w+)"),
                    equal_to([["key1:value1", "key1", "value1"]]), label="am")
        assert_that(pc | "mkv" >> util.Regex.matches_kv(r"(\w+):(\w+)", 1, 2),
                    equal_to([("key1", "value1")]), label="mkv")


def test_regex_find_find_all_and_find_kv(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create(LINES)
        assert_that(pc | "f" >> util.Regex.find(r"\d"),
                    equal_to([re.search(r"\d", s).group(0) for s in LINES if re.search(r"\d", s)]),
                    label="f")
        assert_that(pc | "fa" >> util.Regex.find_all(r"[a-z]\d", outputEmpty=False),
                    equal_to([re.findall(r"[a-z]\d", s) for s in LINES]), label="fa")
        # outputEmpty (default True) keeps empty matches of a pattern that can match nothing
        assert_that(pc | "fa0" >> (beam.Filter(lambda s: s == "a1b2c3")
                                   | util.Regex.find_all(r"\d*")),
                    equal_to([[m.group(0) for m in re.finditer(r"\d*", "a1b2c3")]]), label="fa0")
        assert_that(pc | "faAll" >> (beam.Filter(lambda s: s == "a1b2c3")
                                     | util.Regex.find_all(r"[a-z](\d)", group=util.Regex.ALL)),
                    equal_to([[("a1", "1"), ("b2", "2"), ("c3", "3")]]), label="faAll")
        assert_that(pc | "fkv" >> util.Regex.find_kv(r"([a-z])(\d)", 1, 2),
                    equal_to([m.group(1, 2) for s in LINES for m in re.finditer(r"([a-z])(\d)", s)]),
                    label="fkv")


def test_regex_replace_and_split(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create(LINES)
        assert_that(pc | "ra" >> util.Regex.replace_all(r"\d", "#"),
                    equal_to([re.sub(r"\d", "#", s) for s in LINES]), label="ra")
        assert_that(pc | "rf" >> util.Regex.replace_first(r"\d", "#"),
                    equal_to([re.sub(r"\d", "#", s, count=1) for s in LINES]), label="rf")
        assert_that(pc | "sp" >> util.Regex.split(" "),
                    equal_to([[x for x in s.split(" ") if x] for s in LINES]), label="sp")
        assert_that(pc | "spe" >> util.Regex.split(" ", outputEmpty=True),
                    equal_to([s.split(" ") for s in LINES]), label="spe")


def test_regex_rejects_an_invalid_pattern():
    with pytest.raises(InvalidArgumentError, match="not a valid regular expression"):
        util.Regex.matches("(")


# ---------------------------------------------------------------------------------------
# ToString, LogElements, Reify, Tee


def test_to_string(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create([("a", 1), ("b", 2)])
        assert_that(pc | util.ToString.Element(), equal_to(["('a', 1)", "('b', 2)"]), label="el")
        # Kvs and Iterables share Beam's label: a second application needs its own
        assert_that(pc | "Kvs" >> util.ToString.Kvs(), equal_to(["a,1", "b,2"]), label="kvs")
        assert_that(p | "L" >> beam.Create([[1, 2, 3]]) | util.ToString.Iterables("|"),
                    equal_to(["1|2|3"]), label="it")


def test_log_elements_logs_at_the_level_and_passes_elements_on(caplog, runner, make_pipeline):
    if runner != "LocalRunner":
        pytest.skip("log records of Spark workers are not captured by caplog")
    with caplog.at_level(logging.INFO, logger="headrace.transforms.util"):
        with make_pipeline() as p:
            out = (p | beam.Create([TV("x", 10), TV("y", 20)])
                   | beam.WindowInto(window.FixedWindows(10))
                   | util.LogElements(prefix="> ", with_timestamp=True, with_window=True,
                                      level=logging.WARNING, use_epoch_time=True))
            assert_that(out, equal_to(["x", "y"]))
    lines = sorted(r.getMessage() for r in caplog.records if r.name == "headrace.transforms.util")
    # Beam's use_epoch_time prints Timestamp.seconds(), an int
    assert lines == ["> x, timestamp=10, window(start=10, end=20)",
                     "> y, timestamp=20, window(start=20, end=30)"]
    assert {r.levelno for r in caplog.records if r.name == "headrace.transforms.util"} == {
        logging.WARNING}


def test_log_elements_prints_without_a_level(capsys, runner, make_pipeline):
    if runner != "LocalRunner":
        pytest.skip("the output of Spark workers is not captured by capsys")
    with make_pipeline() as p:
        _ = p | beam.Create([TV(1, 0)]) | util.LogElements(with_timestamp=True)
    assert capsys.readouterr().out.splitlines() == ["1, timestamp='" + Timestamp(0).to_rfc3339() + "'"]


def test_reify(make_pipeline):
    TWV = test_util.TestWindowedValue
    with make_pipeline() as p:
        pc = p | beam.Create([TV(("a", 1), 100), TV(("b", 2), 200)]) | beam.Map(lambda x: x)
        # Reify.Timestamp: a ParDo's TimestampedValue output is unwrapped, as in Beam
        assert_that(pc | util.Reify.Timestamp(), equal_to([
            TWV(("a", 1), Timestamp(100), [GlobalWindow()]),
            TWV(("b", 2), Timestamp(200), [GlobalWindow()])]), reify_windows=True, label="ts")
        assert_that(pc | util.Reify.Window(), equal_to([
            TWV((("a", 1), Timestamp(100), GlobalWindow()), Timestamp(100), [GlobalWindow()]),
            TWV((("b", 2), Timestamp(200), GlobalWindow()), Timestamp(200), [GlobalWindow()])]),
            reify_windows=True, label="w")
        assert_that(pc | util.Reify.TimestampInValue(), equal_to([
            ("a", TV(1, 100)), ("b", TV(2, 200))]), label="tsv")
        windowed = pc | beam.WindowInto(window.FixedWindows(150))
        assert_that(windowed | util.Reify.WindowInValue(), equal_to([
            ("a", (1, Timestamp(100), IntervalWindow(0, 150))),
            ("b", (2, Timestamp(200), IntervalWindow(150, 300)))]), label="wv")


def test_tee_applies_each_consumer_and_returns_its_input(make_pipeline):
    with make_pipeline() as p:
        seen = []

        def side(pcoll):
            assert_that(pcoll | beam.Map(lambda x: x * 10), equal_to([10, 20, 30]), label="side")
            seen.append(pcoll)

        out = (p | beam.Create([1, 2, 3])
               | util.Tee(side, beam.Map(lambda x: -x) | "Neg" >> beam.combiners.ToList())
               | beam.Map(lambda x: x + 1))
        assert_that(out, equal_to([2, 3, 4]))
    assert len(seen) == 1


# ---------------------------------------------------------------------------------------
# key-value helpers, Distinct, Reshuffle


def test_with_keys_constant_callable_and_side_input_arguments(make_pipeline):
    words = ["a", "bb", "ccc"]
    with make_pipeline() as p:
        pc = p | beam.Create(words)
        offset = p | "Offset" >> beam.Create([100])
        assert_that(pc | "Len" >> util.WithKeys(len), equal_to([(len(w), w) for w in words]),
                    label="len")
        assert_that(pc | "Const" >> util.WithKeys("k"), equal_to([("k", w) for w in words]),
                    label="const")
        assert_that(pc | "Arg" >> util.WithKeys(lambda w, n: len(w) * n, 3),
                    equal_to([(len(w) * 3, w) for w in words]), label="arg")
        assert_that(pc | "Side" >> util.WithKeys(lambda w, off: len(w) + off,
                                                 beam.pvalue.AsSingleton(offset)),
                    equal_to([(len(w) + 100, w) for w in words]), label="side")


def test_with_keys_refuses_arguments_for_a_constant_key():
    with pytest.raises(InvalidArgumentError, match="only a callable key"):
        util.WithKeys("k", 1)


def test_keys_values_kvswap_distinct(make_pipeline):
    pairs = [("a", 1), ("b", 2), ("a", 3), ("a", 1)]
    with make_pipeline() as p:
        pc = p | beam.Create(pairs)
        assert_that(pc | util.Keys(), equal_to([k for k, _ in pairs]), label="k")
        assert_that(pc | util.Values(), equal_to([v for _, v in pairs]), label="v")
        assert_that(pc | util.KvSwap(), equal_to([(v, k) for k, v in pairs]), label="s")
        assert_that(pc | util.Distinct(), equal_to(sorted(set(pairs))), label="d")
        assert_that(pc | "rd" >> util.RemoveDuplicates(), equal_to(sorted(set(pairs))), label="rd")


@pytest.mark.parametrize("bad", [0, -3, 1.5, True, "4"])
def test_reshuffle_num_buckets_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="num_buckets"):
        util.Reshuffle(num_buckets=bad)


def test_reshuffle_with_num_buckets_keeps_elements_timestamps_and_windows(make_pipeline):
    data = [TV(i, i) for i in range(20)]
    with make_pipeline(bundle_size=3) as p:
        out = (p | beam.Create(data) | beam.WindowInto(window.FixedWindows(5))
               | util.Reshuffle(num_buckets=2)
               | beam.Map(lambda x, t=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam:
                          (x, t.micros // 1_000_000, int(w.start))))
        assert_that(out, equal_to([(i, i, i // 5 * 5) for i in range(20)]))


def test_util_names_are_top_level_as_in_beam():
    # Beam's `apache_beam` re-exports `transforms.util`: beam.Regex, beam.BatchElements, ...
    for name in ("BatchElements", "LogElements", "Regex", "Reify", "Tee", "ToString", "WithKeys",
                 "Distinct", "Keys", "Values", "KvSwap", "Reshuffle"):
        assert getattr(beam, name) is getattr(util, name) is getattr(beam.transforms, name), name
