"""Read -> plain element-wise steps -> CombinePerKey: the shape runners may run in one pass
(the Spark runner runs it over columnar bundles). Whatever the path, the answers, retries,
errors and metrics must be those of the element-by-element execution."""

from __future__ import annotations

import collections

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import counter_value

LINES = [f"{k},{v},{t}" for k, v, t in
         [("a", 1, 5), ("b", 2, 65), ("a", 3, 70), ("c", 4, 10), ("a", 5, 130), ("b", 6, 61)] * 50]


@pytest.fixture
def lines_file(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text("\n".join(LINES) + "\n")
    return str(path)


def _expected_sums():
    sums = collections.Counter()
    for line in LINES:
        k, v, t = line.split(",")
        sums[(k, int(t) // 60 * 60)] += int(v)
    return sorted(sums.items())


def _parse(line):
    k, v, t = line.split(",")
    return beam.TimestampedValue((k, int(v)), int(t))


def _with_window(kv, w=beam.DoFn.WindowParam):
    return ((kv[0], int(w.start)), kv[1])


def test_read_map_window_combine(make_pipeline, lines_file):
    with make_pipeline(bundle_size=7) as p:
        out = (p | beam.io.ReadFromText(lines_file)
               | beam.Filter(lambda line: bool(line.strip()))
               | beam.Map(_parse)
               | beam.WindowInto(window.FixedWindows(60))
               | beam.CombinePerKey(sum)
               | beam.Map(_with_window))
        assert_that(out, equal_to(_expected_sums()))


def test_a_failing_map_is_retried_and_counted_once(make_pipeline, lines_file, once):
    def parse_flaky(line, once=once):
        beam.Metrics.counter("read_combine", "parsed").inc()
        if line == LINES[10] and once.first("flaky"):
            raise RuntimeError("flaky parse")
        return _parse(line)

    p = make_pipeline(bundle_size=9)
    out = (p | beam.io.ReadFromText(lines_file)
           | "Parse" >> beam.Map(parse_flaky)
           | beam.WindowInto(window.FixedWindows(60))
           | beam.CombinePerKey(sum)
           | beam.Map(_with_window))
    assert_that(out, equal_to(_expected_sums()))
    result = p.run()
    assert counter_value(result, "parsed") == len(LINES)
    assert counter_value(result, "parsed", attempted=True) > len(LINES)


def test_mixed_outputs_and_tagged_outputs_take_the_element_path(make_pipeline, lines_file):
    def parse_some_untimed(line):
        k, v, t = line.split(",")
        return (k, int(v)) if k == "c" else beam.TimestampedValue((k, int(v)), int(t))

    with make_pipeline() as p:
        out = (p | beam.io.ReadFromText(lines_file)
               | beam.Map(parse_some_untimed)
               | beam.WindowInto(window.GlobalWindows())
               | beam.CombinePerKey(sum))
        assert_that(out, equal_to([("a", 450), ("b", 400), ("c", 200)]))


def test_an_element_that_always_fails_names_the_step(make_pipeline, lines_file):
    def bad(line):
        if line.startswith("c"):
            raise ValueError("no c allowed")
        return _parse(line)

    p = make_pipeline(max_bundle_attempts=2)
    (p | beam.io.ReadFromText(lines_file) | "ParseNoC" >> beam.Map(bad)
     | beam.CombinePerKey(sum))
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    assert "ParseNoC" in str(info.value) and "no c allowed" in str(info.value)
