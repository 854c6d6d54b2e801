"""The `headrace` command: `headrace demo [job flags]` runs the example job, `headrace diagram`
draws a recorded step's pane diagram, `headrace graph` a script's pipeline graph, `headrace
version`, `headrace jvm-archive` builds the Spark driver's class archive."""

from __future__ import annotations

import argparse
import os
import platform
import sys
from importlib import metadata
from typing import List, Optional, Sequence


#: The subcommands that parse their own arguments, with what each does.
_OWN_HELP = (
    ("demo", "generate event logs and run the sessions & billing example job"),
    ("report", "render a run report written with --report=DIR again and open it"),
    ("diagram", "draw the pane diagram of a grouping step recorded with --record_panes=DIR"),
    ("graph", "draw the graph of the pipeline a script runs, without running it"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headrace",
        description="headrace: the Dataflow Model (Apache Beam's programming model) in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, text in _OWN_HELP:   # each parses its own arguments: `headrace NAME --help`
        sub.add_parser(name, add_help=False, help=f"{text} (`headrace {name} --help`)")
    sub.add_parser("version", help="print the versions of headrace, Python and PySpark")
    sub.add_parser("jvm-archive", help="build the class archive that makes the Spark driver "
                                       "JVM start faster (once per Java and PySpark version; "
                                       "--force builds it again)")
    return parser


def version_text() -> str:
    """`headrace X (Python Y, pyspark Z)`."""
    from headrace import __version__
    try:
        spark = metadata.version("pyspark")
    except metadata.PackageNotFoundError:
        spark = "not installed"
    return f"headrace {__version__} (Python {platform.python_version()}, pyspark {spark})"


def _jvm_archive_workload(target: str) -> int:
    """The child process of `jvm_archive.build`: runs a small batch and a small streaming
    pipeline on a Spark whose driver JVM writes the classes it loaded to `target` when it exits,
    and a small bounded one over a Spark Connect server in that JVM (when PySpark's Spark
    Connect client is installed), then closes that JVM and waits for it."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    from headrace.runners.spark import jvm_archive, session
    from headrace.testing.test_stream import TestStream
    from headrace.transforms import trigger, window

    options = ["--runner=SparkRunner", "--spark_master=local[2]",
               "--spark_conf=spark.ui.enabled=false",
               "--spark_conf=spark.sql.shuffle.partitions=2",
               f"--spark_conf=spark.driver.extraJavaOptions=-XX:ArchiveClassesAtExit={target} "
               f"{jvm_archive.QUIET}"]
    def bounded(flags: List[str]) -> None:
        with beam.Pipeline(options=PipelineOptions(flags)) as p:
            _ = (p | beam.Create([(f"k{i % 5}", i) for i in range(200)])
                 | beam.CombinePerKey(sum) | beam.GroupByKey() | beam.Map(str))

    bounded(options)
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("a", 1), 1), window.TimestampedValue(("b", 2), 2)])
              .advance_watermark_to(20).add_elements([window.TimestampedValue(("a", 3), 3)])
              .advance_watermark_to_infinity())
    with beam.Pipeline(options=PipelineOptions(options + ["--streaming"])) as p:
        _ = (p | stream | beam.WindowInto(window.FixedWindows(10),
                                          trigger=trigger.AfterWatermark(late=trigger.AfterCount(1)),
                                          accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                                          allowed_lateness=60)
             | beam.CombinePerKey(sum) | beam.Map(str))
    session.stop_session()
    if not session.connect_client_missing():
        # a bounded pipeline over a Spark Connect server started in this JVM: the server's
        # gRPC service and planner, Spark SQL's analyser, optimiser, adaptive execution and
        # Arrow UDFs (the batch runner's plan as DataFrames), which a classic run never loads
        try:
            bounded(["--runner=SparkRunner", "--spark_remote=local[2]",
                     "--spark_conf=spark.sql.shuffle.partitions=2"])
            _connect_client_exit()
        except Exception as exc:  # e.g. another Spark Connect server holds its port
            print(f"jvm-archive: the Spark Connect run failed ({type(exc).__name__}: "
                  f"{str(exc).strip()[:300]}); the archive holds the classic runs' classes")
        session.stop_session()
    from pyspark import SparkContext
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        print("jvm-archive: PySpark did not keep its JVM's process; cannot wait for the dump")
        return 1
    proc.stdin.close()   # the gateway exits on end of input, writing the archive
    rc = proc.wait(timeout=600)
    print(f"jvm-archive: the JVM exited with {rc}")
    return 0 if rc == 0 and os.path.isfile(target) else 1


def _connect_client_exit() -> None:
    """Asks the Spark Connect server what PySpark's client asks when its process exits: to drop
    the session's Spark ML cache, for which the server loads Spark ML's handler (about 490
    classes, 0.3 s on a fresh server here), so the archive holds those classes too. A client
    without that step (another PySpark version) is left alone."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession
    active = ConnectSession.getActiveSession()
    cleanup = getattr(getattr(active, "_client", None), "_cleanup_ml_cache", None)
    if callable(cleanup):
        cleanup()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the `headrace` command line; returns the exit code."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "demo":
        from headrace.examples import sessions_billing
        return sessions_billing.main(args[1:], prog="headrace demo")
    if args and args[0] == "graph":
        from headrace.pipeline import graph
        return graph.main(args[1:])
    if args and args[0] == "report":
        from headrace import report
        return report.main(args[1:])
    if args and args[0] == "diagram":
        from headrace import diagram
        return diagram.main(args[1:])
    if args and args[0] == "jvm-archive":
        if args[1:2] == ["--dump"] and len(args) == 3:
            return _jvm_archive_workload(args[2])
        from headrace.runners.spark import jvm_archive
        return jvm_archive.main(args[1:])
    parser = _parser()
    ns = parser.parse_args(args)
    if ns.command == "version":
        print(version_text())
        return 0
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
