"""A lifted combine whose accumulators are large: the map side's table, bounded in bytes or not.

    python benchmarks/combine_table_memory.py [--events 10000000] [--keys 1000] [--top 1000]
        [--window-hours 24] [--master local[2]] [--repeat 1] [--data-dir DIR] [--json PATH]

The spark_windowed_sum input (bursty events over one week, cached in --data-dir) through
`ReadFromParquet | Map(TimestampedValue) | WindowInto(FixedWindows) | Top.PerKey(--top) |
ParDo(checksum)` on headrace's SparkRunner, twice: with the map-side combine table bounded as
shipped (`runners/kit/partial.py`: `MAX_CELLS` cells and `MAX_BYTES` estimated bytes), and with
the byte bound lifted (`MAX_BYTES` = 2**62, the cell count alone, as before it existed). A Top
accumulator holds up to --top values, so a table of a few thousand cells (keys x windows) takes
hundreds of MB, which the cell count (400,000) never sees. Each run is its own subprocess; this
process samples the RSS of its whole process tree every 50 ms (driver Python, JVM, Python
workers). Both runs must give the same checksum (count, sum and digest of every key, window
and top list); exit status 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import headrace_revision  # noqa: E402
from _spark_bench_common import (  # noqa: E402
    TreeMemorySampler, add_run_flags, finish, kill_tree, prepare_datasets, wait_until_idle,
)

MODES = {"bounded": None, "cells only": 1 << 62}   # mode -> MAX_BYTES set in the run (None: as shipped)
DIGEST_MOD = 1 << 61


def child(args: argparse.Namespace) -> int:
    """One run: the pipeline on headrace's SparkRunner; prints RESULT {json}."""
    import headrace as beam
    from headrace.io.parquetio import ReadFromParquet
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.kit import partial
    from headrace.transforms import combiners, window

    Metrics, MetricsFilter = beam.metrics.Metrics, beam.metrics.MetricsFilter
    if args.max_bytes is not None:
        partial.MAX_BYTES = args.max_bytes

    class Checksum(beam.DoFn):
        """Counts the (key, top list) outputs and fingerprints each with its window."""

        def __init__(self):
            self.outputs = Metrics.counter("bench", "outputs")
            self.values = Metrics.counter("bench", "values")
            self.digest = Metrics.counter("bench", "digest")

        def process(self, kv, w=beam.DoFn.WindowParam):
            key, top = kv
            self.outputs.inc(1)
            self.values.inc(len(top))
            self.digest.inc(zlib.crc32(f"{key}|{w.start.micros}|{top}".encode()))

    options = PipelineOptions(runner="SparkRunner", spark_master=args.master,
                              spark_conf=["spark.ui.enabled=false",
                                          "spark.sql.shuffle.partitions=4",
                                          f"spark.driver.memory={args.driver_memory}"])
    t0 = time.perf_counter()
    p = beam.Pipeline(options=options)
    _ = (p
         | "Read" >> ReadFromParquet(os.path.join(args.input, "part-*.parquet"))
         | "Timestamp" >> beam.Map(
             lambda r: window.TimestampedValue((r["key"], r["value"]), r["ts_ms"] / 1000.0))
         | "Window" >> beam.WindowInto(window.FixedWindows(3600 * args.window_hours))
         | "Top" >> combiners.Top.PerKey(args.top)
         | "Checksum" >> beam.ParDo(Checksum()))
    result = p.run()
    result.wait_until_finish()
    seconds = time.perf_counter() - t0

    def counter(name: str) -> int:
        found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
        return sum(r.committed for r in found)
    checksum = {"outputs": counter("outputs"), "values": counter("values"),
                "digest": counter("digest") % DIGEST_MOD}
    print("RESULT " + json.dumps({"seconds": seconds, "checksum": checksum}), flush=True)
    return 0


def run_one(args: argparse.Namespace, path: str, mode: str) -> Dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--input", path,
           "--top", str(args.top), "--window-hours", str(args.window_hours),
           "--master", args.master, "--driver-memory", args.driver_memory]
    if MODES[mode] is not None:
        cmd += ["--max-bytes", str(MODES[mode])]
    if args.wait_idle:
        wait_until_idle(args.wait_idle)
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    sampler = TreeMemorySampler(proc.pid)
    sampler.start()
    try:
        out, err = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        out, err = proc.communicate()
    sampler.stop()
    sampler.reap()
    rec: Dict[str, Any] = {"mode": mode, "peak_mib": sampler.peak / (1 << 20),
                           "at_peak_mib": {k: v / (1 << 20) for k, v in (sampler.at_peak or {}).items()}}
    lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        rec["error"] = (err.strip().splitlines() or [f"exit status {proc.returncode}"])[-1]
        return rec
    rec.update(json.loads(lines[-1][len("RESULT "):]))
    return rec


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000)
    ap.add_argument("--keys", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--top", type=int, default=1000, help="Top.PerKey's n")
    ap.add_argument("--window-hours", type=int, default=24, help="FixedWindows' size in hours")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--repeat", type=int, default=1, help="runs per mode (alternating); medians shown")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "headrace-spark-windowed-sum"),
                    help="where the input is generated and reused (shared with spark_windowed_sum)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--input", help=argparse.SUPPRESS)
    ap.add_argument("--max-bytes", type=int, default=None, help=argparse.SUPPRESS)
    add_run_flags(ap)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    universe = max(args.events, 10_000_000)
    path = prepare_datasets(args.data_dir, universe, args.keys, args.seed, [args.events])[args.events]
    print(f"headrace {headrace_revision()}: {args.events:,} events, {args.keys:,} keys, "
          f"Top.PerKey({args.top}) in FixedWindows({args.window_hours} h), {args.master}")
    runs: Dict[str, List[Dict[str, Any]]] = {mode: [] for mode in MODES}
    for i in range(args.repeat):
        for mode in MODES:
            rec = run_one(args, path, mode)
            runs[mode].append(rec)
            shown = rec.get("error") or (f"{rec['seconds']:.1f}s, peak {rec['peak_mib']:,.0f} MiB ("
                                         + ", ".join(f"{k} {v:,.0f}" for k, v in rec["at_peak_mib"].items())
                                         + ")")
            print(f"  {mode:<10} run {i + 1}/{args.repeat}: {shown}", flush=True)

    problems: List[str] = []
    checksums = {json.dumps(r["checksum"], sort_keys=True) for rs in runs.values() for r in rs
                 if "checksum" in r}
    errors = [f"{r['mode']}: {r['error']}" for rs in runs.values() for r in rs if "error" in r]
    problems += errors
    if len(checksums) > 1:
        problems.append(f"the runs disagree: {sorted(checksums)}")
    print(f"\n{'mode':<12} {'seconds':>8} {'peak MiB':>9} {'workers MiB at peak':>20}")
    for mode, rs in runs.items():
        ok = [r for r in rs if "seconds" in r]
        if ok:
            print(f"{mode:<12} {statistics.median(r['seconds'] for r in ok):>8.1f} "
                  f"{statistics.median(r['peak_mib'] for r in ok):>9,.0f} "
                  f"{statistics.median(r['at_peak_mib'].get('workers', 0) for r in ok):>20,.0f}")
    if not problems:
        print(f"every run gave the same checksum: {checksums.pop()}")
    return finish(args.json, {"args": vars(args), "runs": runs}, problems)


if __name__ == "__main__":
    sys.exit(main())
