"""One contender of general_path.py, run in its own process so its memory can be measured.

    python benchmarks/_general_path_worker.py \\
        --contender headrace-spark|rdd|headrace-local|headrace-connect \\
        --input 'DIR/events-*.jsonl' --output OUT_DIR [--master local[2]] [--shuffle-partitions 4]
        [--warmup 0]
    .venv-beam/bin/python benchmarks/_general_path_worker.py --contender beam --input ... --output ...

Prints one line `RESULT {json}` on stdout: startup_s (SparkSession start-up, or 0) and seconds (the
job: reading the input, every step, writing every output); on failure {"error": "..."} and exit
status 1, the traceback on stderr. The job itself is in _general_path_job.py. Each SDK is imported
only inside its contender's function.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
import traceback
from typing import Callable, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the repo root, in case headrace is not installed

from _general_path_job import build_pipeline, rdd_job  # noqa: E402

CONTENDERS = ("headrace-spark", "rdd", "headrace-local", "beam")
#: not run unless asked for (--only): the pipeline over Spark Connect
OPTIONAL = ("headrace-connect",)


def spark_args(args: argparse.Namespace) -> argparse.Namespace:
    """What _spark_bench_worker.start_spark / spark_conf expect."""
    return argparse.Namespace(master=args.master, contender=args.contender, pipeline="general",
                              shuffle_partitions=args.shuffle_partitions,
                              driver_memory=args.driver_memory)


def warmups(args: argparse.Namespace, job: Callable[[str], None]) -> None:
    """--warmup untimed runs of `job` first (in the same session: a warmed JVM and Python
    workers), each writing to a directory of its own that is then removed."""
    for i in range(args.warmup):
        out = f"{args.output.rstrip(os.sep)}-warmup-{i}"
        shutil.rmtree(out, ignore_errors=True)
        try:
            job(out)
        finally:
            shutil.rmtree(out, ignore_errors=True)


def run_rdd(args: argparse.Namespace) -> Tuple[float, float]:
    from _spark_bench_worker import start_spark

    t0 = time.perf_counter()
    spark = start_spark(spark_args(args))
    warmups(args, lambda out: rdd_job(spark.sparkContext, args.input, out, args.shuffle_partitions))
    t1 = time.perf_counter()
    rdd_job(spark.sparkContext, args.input, args.output, args.shuffle_partitions)
    t2 = time.perf_counter()
    spark.stop()
    return t1 - t0, t2 - t1


def run_beam_model(beam, options, args: argparse.Namespace) -> float:
    def job(out: str) -> None:
        p = beam.Pipeline(options=options)
        build_pipeline(beam, p, args.input, out)
        p.run().wait_until_finish()
    warmups(args, job)
    t0 = time.perf_counter()
    job(args.output)
    return time.perf_counter() - t0


def started_first(args: argparse.Namespace) -> float:
    """Starts the contender's SparkSession with the RDD job's settings, unless
    --runner-starts-spark leaves that to the runner; the seconds it took (its start-up)."""
    from _spark_bench_worker import start_spark

    if args.runner_starts_spark:
        return 0.0
    t0 = time.perf_counter()
    start_spark(spark_args(args))
    return time.perf_counter() - t0


def run_headrace_spark(args: argparse.Namespace) -> Tuple[float, float]:
    """headrace's SparkRunner; a SparkSession with the RDD job's settings is started first (not
    timed) and the runner's getOrCreate picks it up."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions

    from _spark_bench_worker import spark_conf

    startup = started_first(args)
    options = PipelineOptions(runner="SparkRunner", spark_master=args.master,
                              spark_conf=spark_conf(spark_args(args)))
    return startup, run_beam_model(beam, options, args)


def run_headrace_connect(args: argparse.Namespace) -> Tuple[float, float]:
    """headrace's SparkRunner over Spark Connect: a Spark Connect server started in this process
    with the RDD job's settings (`remote(master)`, timed as start-up), the pipeline run on it
    with --spark_remote (runtime settings only). With --runner-starts-spark the runner starts
    that server itself, with every setting, inside the timed part."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions

    from _spark_bench_worker import spark_conf

    conf = spark_conf(spark_args(args))
    startup = started_first(args)   # the contender's name makes it a Spark Connect session
    if not args.runner_starts_spark:
        conf = [kv for kv in conf if kv.startswith("spark.sql.")]
    options = PipelineOptions(runner="SparkRunner", spark_remote=args.master, spark_conf=conf)
    return startup, run_beam_model(beam, options, args)


def run_headrace_local(args: argparse.Namespace) -> Tuple[float, float]:
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions

    return 0.0, run_beam_model(beam, PipelineOptions(["--runner=LocalRunner"]), args)


def run_beam(args: argparse.Namespace) -> Tuple[float, float]:
    """Apache Beam's Python DirectRunner (its defaults)."""
    import logging

    logging.getLogger().setLevel(logging.ERROR)
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    return 0.0, run_beam_model(beam, PipelineOptions(["--runner=DirectRunner"]), args)


RUNS = {"headrace-spark": run_headrace_spark, "rdd": run_rdd, "headrace-local": run_headrace_local,
        "beam": run_beam, "headrace-connect": run_headrace_connect}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contender", required=True, choices=CONTENDERS + OPTIONAL)
    ap.add_argument("--input", required=True, help="a glob of JSON-lines files")
    ap.add_argument("--output", required=True, help="an empty directory for the outputs")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=4)
    ap.add_argument("--driver-memory", default="2g")
    ap.add_argument("--warmup", type=int, default=0, help="untimed runs in the same session first")
    ap.add_argument("--runner-starts-spark", action="store_true",
                    help="headrace: the SparkRunner starts Spark inside the timed part")
    args = ap.parse_args(argv)
    try:
        startup, seconds = RUNS[args.contender](args)
    except BaseException as e:  # the parent shows this in the table and carries on
        traceback.print_exc()
        message = f"{type(e).__name__}: {e}".strip().splitlines()[0]
        print("RESULT " + json.dumps({"error": message}), flush=True)
        return 1
    print("RESULT " + json.dumps({"startup_s": startup, "seconds": seconds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
