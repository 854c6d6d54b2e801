"""Profile of the general path: where headrace's SparkRunner spends its Python workers' time.

    python benchmarks/general_path_profile.py [--events 1000000] [--master local[2]] [--top 40]

Runs general_path.py's job (benchmarks/_general_path_job.py) once on headrace's SparkRunner with
PySpark's Python worker profiler (`spark.python.profile=true`: cProfile around every Python RDD
function in the workers), then merges the per-RDD profiles and prints the functions with the
most time of their own, and the totals per layer (`LAYERS`: each function is counted in the first
layer whose pattern matches its file and name), in seconds and microseconds per event. Profiling
slows the job about 1.5x, so the figures say where time goes, not how fast the job runs: the
timing is general_path.py's. cProfile counts C built-ins (dict.get, isinstance, object
construction) as functions of their own, not in their caller's time: they are the "other" layer.
"""

from __future__ import annotations

import argparse
import glob
import os
import pstats
import re
import shutil
import sys
import tempfile
import time
from typing import Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [ROOT, HERE]

# (layer, regex over "file:function"): the first that matches counts a function's own time.
LAYERS: List[Tuple[str, str]] = [
    ("pickling and shuffle (pickle, PySpark serializers)",
     r"_pickle|pyspark/serializers|cloudpickle|tasks\.py:(pack|unpack)|FastPickle"),
    ("read and decode (file reads, text lines, JSON)",
     r"BufferedReader|textio\.py|json/|decoder\.py|__init__\.py:loads|_io\."),
    ("user functions (the job's own code)", r"_general_path_job\.py"),
    ("DoFn invocation (ParDoRunner, isolation, stages)",
     r"dofn_runner\.py|isolation\.py|stage\.py|columnar\.py"),
    ("windowed-value and window objects", r"windowed\.py|window\.py|time\.py"),
    ("grouping and merging (core, partial combine, reduce side)",
     r"reduce\.py|partial\.py|grouping\.py|triggers/|tasks\.py:(_reduce_all|_records|_sort_time)"),
    ("formatting and writing (sinks)", r"filebasedsink\.py|BufferedWriter|textio\.py:.*write"),
    ("metrics", r"metrics/"),
    ("task plumbing (tasks, PySpark worker)", r"tasks\.py|pyspark/"),
]


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    """The command line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events in the generated log")
    ap.add_argument("--users", type=int, default=20_000, help="distinct users of the generated log")
    ap.add_argument("--seed", type=int, default=2015)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "headrace-general-path"),
                    help="where the input is generated and reused (as general_path.py)")
    ap.add_argument("--top", type=int, default=40, help="functions to list")
    return ap.parse_args(argv)


def layer_of(func: Tuple[str, int, str]) -> str:
    """The layer a profiled function (file, line, name) belongs to."""
    text = f"{func[0]}:{func[2]}"
    for name, pattern in LAYERS:
        if re.search(pattern, text):
            return name
    return "other"


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the profiled job and prints the tables."""
    args = parse_args(argv)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")])
    from general_path import prepare_input
    os.makedirs(args.data_dir, exist_ok=True)
    pattern = prepare_input(args.data_dir, args.events, args.users, args.seed)

    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(args.master).appName("general-path-profile")
             .config("spark.ui.enabled", "false").config("spark.python.profile", "true")
             .config("spark.sql.shuffle.partitions", str(args.shuffle_partitions))
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")

    import headrace as beam
    from _general_path_job import build_pipeline
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import SparkRunner

    out = tempfile.mkdtemp(prefix="general-path-profile-", dir=args.data_dir)
    dump = tempfile.mkdtemp(prefix="general-path-pstats-", dir=args.data_dir)
    try:
        p = beam.Pipeline(runner=SparkRunner(spark=spark), options=PipelineOptions([]))
        build_pipeline(beam, p, pattern, out)
        t0 = time.perf_counter()
        p.run()
        seconds = time.perf_counter() - t0
        spark.sparkContext.dump_profiles(dump)
        files = sorted(glob.glob(os.path.join(dump, "*.pstats")))
        stats = pstats.Stats(files[0])
        for f in files[1:]:
            stats.add(f)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(dump, ignore_errors=True)

    raw: Dict[Tuple[str, int, str], Tuple[int, int, float, float, dict]] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values())
    n = args.events
    print(f"headrace SparkRunner on {n:,} events, {args.master}, profiled: {seconds:.1f}s wall, "
          f"{total:.1f}s of Python worker time in {len(files)} RDD profiles "
          f"({total / n * 1e6:.1f} us per event)\n")
    by_layer: Dict[str, float] = {}
    for func, v in raw.items():
        by_layer[layer_of(func)] = by_layer.get(layer_of(func), 0.0) + v[2]
    print(f"{'layer':60} {'seconds':>8} {'us/event':>9} {'share':>6}")
    for name, t in sorted(by_layer.items(), key=lambda kv: -kv[1]):
        print(f"{name:60} {t:8.2f} {t / n * 1e6:9.2f} {t / total:6.1%}")
    print(f"\nthe {args.top} functions with the most time of their own:")
    print(f"{'own s':>7} {'cum s':>7} {'calls':>10}  function")
    top = sorted(raw.items(), key=lambda kv: -kv[1][2])[: args.top]
    for (file, line, name), (cc, nc, tt, ct, _) in top:
        short = file if file.startswith("~") else os.path.relpath(file, ROOT) if file.startswith(ROOT) \
            else "/".join(file.split("/")[-2:])
        print(f"{tt:7.2f} {ct:7.2f} {nc:10,}  {short}:{line}({name})")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
