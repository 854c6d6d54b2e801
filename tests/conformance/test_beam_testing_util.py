"""Beam's `testing.util` matchers and `testing.test_pipeline.TestPipeline`, on every runner.

Each matcher is shown to pass on the right input and to fail the run on a wrong one.
"""

from __future__ import annotations

import collections
import unittest

import pytest

import headrace as beam
from headrace.model.time import Timestamp
from headrace.model.window import GlobalWindow, IntervalWindow
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.test_pipeline import TestPipeline
from headrace.testing.util import (
    AssertThat, BeamAssertException, SortLists, assert_that,
    contains_in_any_order, equal_to, equal_to_approx, equal_to_per_window, has_at_least_one,
    is_empty, is_not_empty, matches_all, row_namedtuple_equals_fn,
)
from headrace.testing import util as test_util
from headrace.transforms import window

TV = beam.TimestampedValue


def _fails(make_pipeline, build, match):
    """Builds a pipeline with `build(p)` and checks that running it fails with `match`."""
    p = make_pipeline(max_bundle_attempts=1)
    build(p)
    with pytest.raises(Exception, match=match):
        p.run()


def test_equal_to_per_window(make_pipeline):
    data = [TV("a", 1), TV("b", 3), TV("c", 12)]
    expected = {IntervalWindow(0, 10): ["a", "b"], IntervalWindow(10, 20): ["c"]}

    def build(p, exp):
        pc = p | beam.Create(data) | beam.WindowInto(window.FixedWindows(10))
        assert_that(pc, equal_to_per_window(exp), use_global_window=False)

    p = make_pipeline()
    build(p, expected)
    p.run()
    _fails(make_pipeline, lambda p: build(p, {IntervalWindow(0, 10): ["a"],
                                              IntervalWindow(10, 20): ["c"]}),
           "element 'b' not found in window")
    _fails(make_pipeline, lambda p: build(p, {IntervalWindow(0, 10): ["a", "b", "x"],
                                              IntervalWindow(10, 20): ["c"]}),
           "unmatched elements \\['x'\\]")


def test_use_global_window_false_calls_the_matcher_per_window(make_pipeline):
    data = [TV(1, 1), TV(2, 3), TV(5, 12)]
    expected = {0: [1, 2], 10: [5]}

    def per_window(pair):
        elements, w = pair
        if sorted(elements) != expected[int(w.start)]:
            raise BeamAssertException(f"window {w}: {elements}")

    with make_pipeline() as p:
        pc = p | beam.Create(data) | beam.WindowInto(window.FixedWindows(10))
        assert_that(pc, per_window, use_global_window=False)
        glob = p | "G" >> beam.Create([1, 2])
        assert_that(glob, lambda pair: equal_to([([1, 2], GlobalWindow())])(
            [(sorted(pair[0]), pair[1])]), use_global_window=False, label="global")


def test_equal_to_approx(make_pipeline):
    with make_pipeline() as p:
        pc = p | beam.Create([1.0000000001, (2.0, [3.0000000001]), "s"])
        assert_that(pc, equal_to_approx([1.0, (2.0, [3.0]), "s"]))
        assert_that(pc | "M" >> beam.Map(lambda x: x), equal_to_approx(
            [1.01, (2.0, [3.0]), "s"], rel_tol=0.1), label="tol")
    _fails(make_pipeline, lambda p: assert_that(p | beam.Create([1.001]), equal_to_approx([1.0])),
           "missing elements \\[1.0\\]")


def test_contains_in_any_order_and_sort_lists(make_pipeline):
    with make_pipeline() as p:
        grouped = p | beam.Create([("k", 3), ("k", 1), ("k", 2)]) | beam.GroupByKey()
        assert_that(grouped, equal_to([("k", contains_in_any_order([1, 2, 3]))]))
        assert_that(grouped | SortLists, equal_to([("k", [1, 2, 3])]), label="sorted")
    assert contains_in_any_order([1, 2, 2]) == [2, 1, 2]
    assert contains_in_any_order([1, 2, 2]) != [1, 2]
    _fails(make_pipeline, lambda p: assert_that(
        p | beam.Create([("k", 1), ("k", 1)]) | beam.GroupByKey(),
        equal_to([("k", contains_in_any_order([1]))])), "Failed assert")


def test_matches_all_with_values_and_matcher_objects(make_pipeline):
    class Between:
        def __init__(self, lo, hi):
            self.lo, self.hi = lo, hi

        def matches(self, item):
            return self.lo <= item <= self.hi

        def __repr__(self):
            return f"Between({self.lo}, {self.hi})"

    with make_pipeline() as p:
        assert_that(p | beam.Create([5, 17, 3]), matches_all([3, Between(10, 20), Between(4, 6)]))
    _fails(make_pipeline, lambda p: assert_that(p | beam.Create([5, 30]),
                                                matches_all([5, Between(10, 20)])),
           "unmatched elements \\[30\\]")


def test_row_namedtuple_equals_fn_and_equal_to_with_rows(make_pipeline):
    Point = collections.namedtuple("Point", ["x", "y"])
    assert row_namedtuple_equals_fn(beam.Row(x=1, y=2), Point(1, 2))
    assert not row_namedtuple_equals_fn(beam.Row(x=1, y=2), Point(1, 3))
    assert not row_namedtuple_equals_fn(beam.Row(x=1), Point(1, 2))
    with make_pipeline() as p:
        assert_that(p | beam.Create([Point(1, 2)]), equal_to([beam.Row(x=1, y=2)]))
    _fails(make_pipeline, lambda p: assert_that(p | beam.Create([Point(1, 2)]),
                                                equal_to([beam.Row(x=1, y=9)])),
           "missing elements")


def test_is_empty_is_not_empty_and_has_at_least_one(make_pipeline):
    with make_pipeline() as p:
        assert_that(p | "E" >> beam.Create([]), is_empty(), label="empty")
        pc = p | "N" >> beam.Create([TV(1, 5), TV(2, 50)])
        assert_that(pc, is_not_empty(), label="not_empty")
        has_at_least_one(pc, lambda e, t, w, pane: e == 2 and t == Timestamp(50))
        _ = pc | "AT" >> AssertThat(equal_to([1, 2]))
    _fails(make_pipeline, lambda p: assert_that(p | beam.Create([1]), is_empty()),
           "Failed assert: \\[\\] == \\[1\\]")
    _fails(make_pipeline, lambda p: assert_that(p | beam.Create([]), is_not_empty()), "is empty")
    _fails(make_pipeline, lambda p: has_at_least_one(p | beam.Create([1]), lambda e, *_: e > 1),
           "nothing matches the criterion")


def test_reified_elements_carry_their_pane(make_pipeline):
    with make_pipeline() as p:
        grouped = p | beam.Create([("k", 1)]) | beam.GroupByKey()

        def check(actual):
            (twv,) = actual
            assert isinstance(twv, test_util.TestWindowedValue)
            assert twv.value == ("k", [1]) and twv.pane_info.timing.name == "ON_TIME"
        assert_that(grouped, check, reify_windows=True)


# ---------------------------------------------------------------------------------------
# TestPipeline


def test_test_pipeline_runs_on_exit_with_test_pipeline_options(runner_flags, tmp_path):
    out = tmp_path / "out"
    argv = ["--test-pipeline-options=" + " ".join(runner_flags + ["--bundle_size=3"])]
    with TestPipeline(argv=argv) as p:
        assert p.get_option("bundle_size") == "3"
        assert p.get_option("--bundle_size") == "3"
        assert p.get_option("no_such_flag") is None
        _ = p | beam.Create(["x", "y"]) | beam.io.WriteToText(str(out), shard_name_template="")
    assert sorted(out.read_text().split()) == ["x", "y"]  # ran when the block ended
    assert p.options.view_as(beam.options.pipeline_options.LocalRunnerOptions).bundle_size == 3


def test_test_pipeline_integration_tests_are_skipped_without_options():
    with pytest.raises(unittest.SkipTest):
        TestPipeline(argv=[], is_integration_test=True)
    p = TestPipeline(argv=["--test-pipeline-options=--bundle_size=2", "--not-use-test-runner-api"],
                     is_integration_test=True)
    assert p.not_use_test_runner_api is True
    assert p.get_full_options_as_args(job_name="j", streaming=True, empty=None) == [
        "--bundle_size=2", "--job_name=j", "--streaming"]
    assert TestPipeline.get_options_list(["prog", "--test-pipeline-options=--a=1 --b"]) == [
        "--a=1", "--b"]


def test_test_pipeline_blocking_run_raises_on_failure(runner_flags):
    p = TestPipeline(argv=["--test-pipeline-options=" + " ".join(
        runner_flags + ["--max_bundle_attempts=1"])])
    _ = p | beam.Create([1]) | beam.Map(lambda x: 1 / 0)
    with pytest.raises(Exception, match="ZeroDivisionError"):
        p.run()


def test_test_pipeline_takes_explicit_options(runner_flags):
    p = TestPipeline(options=PipelineOptions(runner_flags + ["--bundle_size=5"]), argv=[])
    assert p.get_pipeline_options() is p.options
    assert_that(p | beam.Create([1, 2]), equal_to([1, 2]))
    assert p.run().wait_until_finish() == beam.PipelineState.DONE
