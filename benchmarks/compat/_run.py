"""Runs one Beam-compatibility program with one SDK and writes its output lines to one file.

    COMPAT_SDK=headrace python benchmarks/compat/_run.py NAME --inputs DIR --output FILE \
        [--runner=SparkRunner --spark_master=local[2] ...]

NAME is a module of benchmarks/compat/ that defines `build(p, inputs)`, returning a PCollection
of str lines, and may set `STREAMING = True` (the pipeline then runs with --streaming) and
define `make_inputs(dir)` (plain Python that writes its input files; beam_compat.py calls it
once, before either SDK runs). The lines are written with WriteToText to one unsharded file;
a streaming program's lines are first re-windowed into one fixed window of ~300 years with the
default trigger (Beam writes an unbounded PCollection only in non-global windows), so that they
are written once, when the input ends, to a file per window and pane named after FILE.
"""

import argparse
import importlib
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _sdk import PipelineOptions, WriteToText, beam, window  # noqa: E402


def main(argv=None):
    """Parses the arguments, builds the program's pipeline, runs it and writes its lines."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--inputs", required=True, help="the directory make_inputs wrote")
    ap.add_argument("--output", required=True, help="the file to write the output lines to")
    known, pipeline_args = ap.parse_known_args(argv)
    program = importlib.import_module(known.name)
    if getattr(program, "STREAMING", False):
        pipeline_args.append("--streaming")
    if not any(a.startswith("--runner") for a in pipeline_args):
        pipeline_args.append("--runner=DirectRunner")
    with beam.Pipeline(options=PipelineOptions(pipeline_args)) as p:
        lines = program.build(p, known.inputs)
        if getattr(program, "STREAMING", False):
            # Beam writes an unbounded PCollection only in non-global windows (a file per window
            # and pane): one window of ~300 years from the epoch, fired once the stream ends
            lines = lines | "OneWindow" >> beam.WindowInto(window.FixedWindows(10 ** 10))
            lines | "Write" >> WriteToText(known.output)
        else:
            lines | "Write" >> WriteToText(known.output, shard_name_template="")


if __name__ == "__main__":
    main()
