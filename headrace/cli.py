"""The `headrace` command: `headrace demo [job flags]` runs the example job, `headrace version`,
`headrace jvm-archive` builds the Spark driver's class archive."""

from __future__ import annotations

import argparse
import platform
import sys
from importlib import metadata
from typing import List, Optional, Sequence


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="headrace",
        description="headrace: the Dataflow Model (Apache Beam's programming model) in Python.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("demo", add_help=False,
                   help="generate event logs and run the sessions & billing example job "
                        "(`headrace demo --help` lists its flags)")
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


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the `headrace` command line; returns the exit code."""
    args: List[str] = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "demo":
        from headrace.examples import sessions_billing
        return sessions_billing.main(args[1:], prog="headrace demo")
    if args and args[0] == "jvm-archive":
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
