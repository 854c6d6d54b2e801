"""Pipelines run over Spark Connect by `test_spark_connect.py`, in a process of their own.

`python -m tests.streaming.connect_scenarios sc://HOST:PORT RESULTS.json` runs every scenario
below with `--runner=SparkRunner --spark_remote=sc://HOST:PORT` and writes, per scenario, whether
it passed and what it saw, for the test to check. PySpark allows no classic session in a
process that uses Spark Connect, so this process starts none: it is a Spark Connect client
only, as on a cluster that offers nothing else.
"""

from __future__ import annotations

import json
import sys
import time
import traceback

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.io.textio import ReadFromText
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import window
from tests._support import Panes, counter_value

TV = beam.TimestampedValue
US = 1_000_000
EOW = 10 * US - 1  # the end of window [0, 10): the panes' timestamp (default TimestampCombiner)


def late_script():
    """Keys a and b in FixedWindows(10) with 15 s of allowed lateness (the late-data script of
    tests/conformance/test_test_stream.py, shortened): on-time panes, a late pane, a drop."""
    return (TestStream()
            .add_elements([TV(("a", 1), 1), TV(("b", 10), 2), TV(("a", 2), 3)])
            .advance_watermark_to(10)                   # on time: a [1, 2], b [10]
            .add_elements([TV(("a", 3), 4)])            # late, within lateness: a [3]
            .advance_watermark_to(30)                   # [0, 10) expires (9.999999 + 15 < 30)
            .add_elements([TV(("a", 4), 5)]))           # too late: dropped (and counted)


# (key, values, window start, timestamp, timing, index, nonspeculative index), worked out by
# hand from the script: the default trigger fires on time, then once per late element.
LATE_PANES = [
    ("a", (1, 2), 0.0, EOW, "ON_TIME", 0, 0),
    ("a", (3,), 0.0, EOW, "LATE", 1, 1),
    ("b", (10,), 0.0, EOW, "ON_TIME", 0, 0),
]


def _options(url, *flags):
    return PipelineOptions(["--runner=SparkRunner", f"--spark_remote={url}", *flags])


def stream_panes(url):
    """The late-data TestStream script gives the same panes (and counts the same drop) over
    Spark Connect as on the LocalRunner, the reference."""
    seen = {}
    for name, options in (("LocalRunner", PipelineOptions(["--runner=LocalRunner"])),
                          ("SparkRunner", _options(url))):
        p = beam.Pipeline(options=options)
        panes = (p | late_script()
                 | beam.WindowInto(window.FixedWindows(10), allowed_lateness=15)
                 | beam.GroupByKey() | beam.ParDo(Panes()))
        assert_that(panes, equal_to(LATE_PANES))
        result = p.run()
        state = result.wait_until_finish()
        assert state == beam.PipelineState.DONE, (name, state)
        seen[name] = counter_value(result, "dropped_late_elements")
    assert seen == {"LocalRunner": 1, "SparkRunner": 1}, seen
    return {"dropped": seen}


def bounded_pipeline(url):
    """A bounded pipeline (Create, CombinePerKey) without --streaming: it runs as the batch
    runner's jobs made of DataFrame operations (Spark Connect has no RDDs), not as a streaming
    query (whose result would be a StreamingPipelineResult)."""
    p = beam.Pipeline(options=_options(url))
    sums = (p | beam.Create([("a", 1), ("b", 2), ("a", 3)]) | beam.CombinePerKey(sum))
    assert_that(sums, equal_to([("a", 4), ("b", 2)]))
    result = p.run()
    assert result.wait_until_finish() == beam.PipelineState.DONE
    return {"result": type(result).__name__}


def _fails(x):
    if x == 2:
        raise ValueError("two is not allowed")
    return x


def step_failure(url):
    """A DoFn's error over Spark Connect: the step's PipelineExecutionError, as on every runner."""
    p = beam.Pipeline(options=_options(url, "--max_bundle_attempts=1"))
    _ = p | TestStream().add_elements([1, 2, 3]) | "Check" >> beam.Map(_fails)
    try:
        p.run()
    except PipelineExecutionError as exc:
        assert exc.step == "Check", exc.step
        assert "two is not allowed" in str(exc), str(exc)
        return {"message": str(exc)}
    raise AssertionError("the pipeline did not fail")


def static_conf_refused(url):
    """A --spark_conf entry that is not a runtime setting cannot be set through Spark Connect."""
    p = beam.Pipeline(options=_options(url, "--spark_conf=spark.executor.memory=3g"))
    _ = p | beam.Create([1])
    try:
        p.run()
    except InvalidArgumentError as exc:
        assert "spark.executor.memory" in str(exc) and "start-connect-server.sh" in str(exc), str(exc)
        return {"message": str(exc)}
    raise AssertionError("the pipeline ran")


def runtime_conf_applied(url):
    """A runtime Spark SQL setting given with --spark_conf is set on the Spark Connect session."""
    from headrace.runners.spark import session as sessions
    options = _options(url, "--spark_conf=spark.sql.session.timeZone=Asia/Tokyo")
    spark = sessions.get_session(options)
    zone = spark.conf.get("spark.sql.session.timeZone")
    assert zone == "Asia/Tokyo", zone
    assert sessions.is_connect(spark)
    return {"timeZone": zone}


def bounded_read(url, tmp):
    """A bounded read (text files) runs over Spark Connect."""
    words = {}
    for f in range(3):
        lines = [" ".join(f"w{(f + i + j) % 5}" for j in range(i % 4 + 1)) for i in range(20)]
        with open(f"{tmp}/lines-{f}.txt", "w") as fh:
            fh.write("\n".join(lines) + "\n")
        for line in lines:
            for w in line.split():
                words[w] = words.get(w, 0) + 1
    with beam.Pipeline(options=_options(url)) as p:
        counts = (p | "ReadLines" >> ReadFromText(f"{tmp}/lines-*.txt")
                  | beam.FlatMap(str.split) | beam.combiners.Count.PerElement())
        assert_that(counts, equal_to(sorted(words.items())))
    return {"words": len(words)}


def demo_stream(url, tmp):
    """The streaming demo (a directory filled while the query reads it) over Spark Connect:
    its late panes, its drops and its revenue check."""
    from headrace.examples.sessions_billing import cli
    args, extra = cli.parse_args(["--streaming", "--events", "2000", "--users", "30", "--files",
                                  "12", "--interval", "0.05", "--workdir", f"{tmp}/demo",
                                  f"--spark_remote={url}"])
    r = cli.run_streaming(args, extra)
    assert r.final_revenue_micros == r.expected_revenue_micros > 0, cli.format_streaming(r)
    return {"late_panes": r.panes["session"]["LATE"], "dropped": r.dropped_late,
            "too_late_lines": r.too_late_lines}


def splittable_dofn(url):
    """A splittable DoFn over Spark Connect (a bounded pipeline: a streaming query there): each
    call claims two positions and checkpoints with a delay of 0.3 s of real processing time;
    every position is read once, each resumed call after the delay."""
    from tests.conformance.test_splittable_dofn import CheckpointEvery, _check_resumes
    ns, k, delay = [5, 3], 2, 0.3
    with beam.Pipeline(options=_options(url)) as p:
        out = p | beam.Create(ns) | beam.ParDo(CheckpointEvery(k, delay))
        assert_that(out, lambda got: _check_resumes(got, ns, k, delay))
    return {"elements": len(ns)}


SCENARIOS = [stream_panes, bounded_pipeline, step_failure, static_conf_refused,
             runtime_conf_applied, bounded_read, demo_stream, splittable_dofn]


def main(argv):
    """Runs every scenario against the server at argv[0]; writes the outcomes to argv[1]."""
    import tempfile
    url, out = argv[0], argv[1]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for scenario in SCENARIOS:
            args = (url, tmp) if scenario in (bounded_read, demo_stream) else (url,)
            start = time.monotonic()
            try:
                results[scenario.__name__] = {"ok": True, "detail": scenario(*args)}
            except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
                results[scenario.__name__] = {"ok": False, "detail": traceback.format_exc()}
            results[scenario.__name__]["seconds"] = round(time.monotonic() - start, 1)
    with open(out, "w") as fh:
        json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
