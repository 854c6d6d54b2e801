"""Beam's `io.watch.Watch`: each input polled until its termination condition fires or a poll is
complete, each output emitted once as an (input, output) pair; a splittable DoFn, unbounded per
element, on every runner. Expected pairs come from what the tests' poll functions can return."""

from __future__ import annotations

import os

import pytest

import headrace as beam
from headrace.errors import HeadraceError, InvalidArgumentError, UnsupportedArgumentError
from headrace.io.watch import (
    PollResult, Watch, after_time_since_new_output, after_total_of, either_of, never,
)
from headrace.testing.util import assert_that, equal_to


class ListDir:
    """Polls a directory: its file names. Each poll also adds the next file (up to `last`), so
    the watched set grows while the pipeline runs."""

    def __init__(self, last):
        self.last = last

    def __call__(self, directory):
        names = sorted(os.listdir(directory))
        if len(names) < self.last:
            with open(os.path.join(directory, f"f{len(names)}"), "w") as fh:
                fh.write("x")
        return PollResult.incomplete(names)


def test_watch_emits_each_new_output_once_until_idle(make_pipeline, tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    for d in dirs:
        d.mkdir()
    with make_pipeline() as p:
        out = (p | beam.Create([str(d) for d in dirs])
               | Watch(ListDir(4), poll_interval=0.02, termination=after_time_since_new_output(1.0))
               | beam.MapTuple(lambda d, name: (os.path.basename(d), name)))
        assert out.is_bounded is False
        assert_that(out, equal_to([(d, f"f{i}") for d in ("a", "b") for i in range(4)]))


def _complete(n):
    return PollResult.complete([f"item{i}" for i in range(n)], timestamp=100)


def test_a_complete_poll_ends_the_input_and_releases_its_watermark(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create([2, 3]) | Watch(_complete, poll_interval=3600)
               | beam.WindowInto(beam.window.FixedWindows(1000)) | beam.GroupByKey()
               | beam.MapTuple(lambda n, items: (n, sorted(items))))
        # one poll each (the next would be an hour later): ON_TIME panes once the watermark is released
        assert_that(out, equal_to([(2, ["item0", "item1"]), (3, ["item0", "item1", "item2"])]))


def _same_names(element):
    return PollResult.incomplete([("x", 1), ("x", 2), ("y", 3)], timestamp=5)


def test_outputs_are_deduplicated_by_their_key(make_pipeline):
    with make_pipeline() as p:
        out = (p | beam.Create(["in"])
               | Watch(_same_names, poll_interval=0.02, termination=either_of(
                   after_total_of(0.3), never()), output_key_fn=lambda kv: kv[0])
               | beam.MapTuple(lambda _, kv: kv[0]))
        assert_that(out, equal_to(["x", "y"]))


def _not_a_result(element):
    return [element]


def test_a_poll_function_must_return_a_poll_result(make_pipeline):
    with pytest.raises(HeadraceError, match="return a PollResult"):
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = p | beam.Create([1]) | "Polls" >> Watch(_not_a_result, poll_interval=1)


def test_watch_checks_its_arguments():
    with pytest.raises(InvalidArgumentError, match="poll_interval"):
        Watch(_complete, poll_interval=None)
    with pytest.raises(UnsupportedArgumentError, match="timestamp_cursor"):
        Watch(_complete, poll_interval=1, timestamp_cursor=True)
