"""The fixed cost of a Spark headrace starts: a first small job, with and without the JVM class archive.

    ./dev bench jvm_start [--repeat 3] [--streaming] [--wait-idle SECONDS] [--json PATH]

Each run is a fresh Python process that starts Spark on `local[2]` through headrace and runs
one small pipeline (`Create` of 100 elements, `CombinePerKey(sum)`; with `--streaming`, a
TestStream of three steps into windowed sums on the streaming runner) and exits; the time is
the process's wall clock from its start to the pipeline's end (Spark's start included, the
JVM's exit not). Runs alternate between `HEADRACE_JVM_ARCHIVE=off` and the class archive of
`headrace jvm-archive` (built first, into headrace's cache, if it is not there: that build's
time is printed too, and is paid once per Java and PySpark version). Prints the median and the
runs of each.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from _spark_bench_common import add_run_flags, finish, wait_until_idle  # noqa: E402

PROBE = r'''
import sys, time
t0 = float(sys.argv[1])
import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from headrace.testing.test_stream import TestStream
from headrace.transforms import window
flags = ["--runner=SparkRunner", "--spark_master=local[2]", "--spark_conf=spark.ui.enabled=false",
         "--spark_conf=spark.sql.shuffle.partitions=2"]
if sys.argv[2] == "streaming":
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("a", 1), 1)]).advance_watermark_to(20)
              .add_elements([window.TimestampedValue(("b", 2), 21)]).advance_watermark_to_infinity())
    with beam.Pipeline(options=PipelineOptions(flags + ["--streaming"])) as p:
        _ = (p | stream | beam.WindowInto(window.FixedWindows(10)) | beam.CombinePerKey(sum))
else:
    with beam.Pipeline(options=PipelineOptions(flags)) as p:
        _ = p | beam.Create([(i % 3, i) for i in range(100)]) | beam.CombinePerKey(sum)
print("SECONDS", time.time() - t0)
'''


def one_run(archive: bool, streaming: bool, timeout: float) -> float:
    """One fresh process's time to its pipeline's end, in seconds."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=REPO)
    env["HEADRACE_JVM_ARCHIVE"] = "on" if archive else "off"
    out = subprocess.run([sys.executable, "-c", PROBE, repr(time.time()),
                          "streaming" if streaming else "batch"], env=env, capture_output=True,
                         text=True, timeout=timeout)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("SECONDS ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"probe failed (exit {out.returncode}):\n{out.stderr[-2000:]}")
    return float(lines[-1].split()[1])


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--streaming", action="store_true", help="a streaming first pipeline")
    add_run_flags(ap)
    args = ap.parse_args(argv)
    from headrace.runners.spark import jvm_archive
    path = jvm_archive.archive_path()
    results: Dict[str, Any] = {"archive": path, "streaming": args.streaming}
    if path is None or not os.path.isfile(path):
        t0 = time.monotonic()
        path = jvm_archive.build()
        results["build_seconds"] = round(time.monotonic() - t0, 1)
        print(f"built the archive in {results['build_seconds']} s: {path} "
              f"({os.path.getsize(path) / 1e6:.0f} MB)")
    runs: Dict[str, List[float]] = {"without": [], "with": []}
    for _ in range(args.repeat):
        for name in ("without", "with"):
            if args.wait_idle:
                wait_until_idle(args.wait_idle)
            runs[name].append(one_run(name == "with", args.streaming, args.timeout))
    kind = "streaming (TestStream, 3 steps)" if args.streaming else "batch (Create, CombinePerKey)"
    print(f"Spark start and a first {kind} pipeline on local[2], a fresh process each, "
          f"{args.repeat} runs each:")
    for name, ts in runs.items():
        print(f"  {name:>7} the class archive: median {statistics.median(ts):5.1f} s  "
              f"(runs: {', '.join(f'{t:.1f}' for t in ts)})")
        results[name] = ts
    saved = statistics.median(runs["without"]) - statistics.median(runs["with"])
    print(f"  saved: {saved:.1f} s a start")
    return finish(args.json, results, [])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
