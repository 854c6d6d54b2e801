"""Bounded reads in a streaming pipeline: a file read, on its own or beside a TestStream.

On the Spark runner, `--streaming` (or a TestStream in the pipeline) makes the pipeline one
Structured Streaming query; a bounded `Read` is then the splittable DoFn `BoundedSourceReader`
over a Create of the source, its parts spread over the step's buckets and read within the
micro-batches' budget, and its output watermark goes to +infinity once every part is read.
The results must be the batch results; expected values are computed here from the files.
"""

from __future__ import annotations

import json

import pytest

import headrace as beam
from headrace.errors import PipelineExecutionError
from headrace.io.iobase import BoundedSource, Read
from headrace.io.jsonio import ReadFromJson
from headrace.io.textio import ReadFromText
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from headrace.pvalue import AsDict

TV = beam.window.TimestampedValue


def _write_events(tmp_path, n_files=3, per_file=40):
    """CSV lines key,seconds,value in several files; returns every (key, seconds, value)."""
    events = []
    for f in range(n_files):
        lines = []
        for i in range(per_file):
            key, t, v = f"k{(f * 7 + i) % 4}", (f * 13 + i * 3) % 60, f * 100 + i
            events.append((key, t, v))
            lines.append(f"{key},{t},{v}")
        (tmp_path / f"events-{f}.csv").write_text("\n".join(lines) + "\n")
    return events


def _parse(line):
    key, t, v = line.split(",")
    return beam.window.TimestampedValue((key, int(v)), int(t))


def test_text_files_read_in_a_streaming_pipeline_give_the_batch_results(make_pipeline, tmp_path):
    events = _write_events(tmp_path)
    p = make_pipeline(streaming=True, bundle_size=7)
    sums = (p | ReadFromText(str(tmp_path / "events-*.csv"))
            | beam.Map(_parse)
            | beam.WindowInto(window.FixedWindows(20))
            | beam.CombinePerKey(sum)
            | beam.Map(lambda kv, w=beam.DoFn.WindowParam: (kv[0], int(w.start), kv[1])))
    expected = {}
    for key, t, v in events:
        expected[(key, t // 20 * 20)] = expected.get((key, t // 20 * 20), 0) + v
    assert_that(sums, equal_to([(k, s, v) for (k, s), v in expected.items()]))
    p.run().wait_until_finish()


def test_a_bounded_read_is_the_side_input_of_a_test_stream(make_pipeline, tmp_path):
    rates = {"a": 2, "b": 3, "c": 5}
    path = tmp_path / "rates.jsonl"
    path.write_text("".join(json.dumps({"k": k, "rate": r}) + "\n" for k, r in rates.items()))
    p = make_pipeline()
    table = p | ReadFromJson(str(path)) | beam.Map(lambda d: (d["k"], d["rate"]))
    stream = (TestStream()
              .add_elements([TV(("a", 1), 1), TV(("b", 1), 2)])
              .advance_watermark_to(5)
              .add_elements([TV(("c", 2), 6), TV(("a", 4), 7)])
              .advance_watermark_to_infinity())
    billed = (p | stream
              | beam.Map(lambda kv, r: (kv[0], kv[1] * r[kv[0]]), r=AsDict(table))
              | beam.WindowInto(window.FixedWindows(100))
              | beam.CombinePerKey(sum))
    usage = [("a", 1), ("b", 1), ("c", 2), ("a", 4)]
    expected = {}
    for k, v in usage:
        expected[k] = expected.get(k, 0) + v * rates[k]
    assert_that(billed, equal_to(sorted(expected.items())))
    p.run().wait_until_finish()


class _Broken(BoundedSource):
    """Two parts; reading the second fails."""

    def split(self, desired_parallelism):
        return [0, 1]

    def read(self, part):
        if part == 1:
            raise OSError("disk on fire")
        yield from range(5)


def test_a_failing_bounded_read_in_a_streaming_pipeline_names_the_step(make_pipeline):
    p = make_pipeline(streaming=True, max_bundle_attempts=1)
    _ = p | "Broken" >> Read(_Broken()) | beam.Map(lambda x: x)
    with pytest.raises(PipelineExecutionError) as info:
        p.run().wait_until_finish()
    assert "'Broken'" in str(info.value) and "disk on fire" in str(info.value)
