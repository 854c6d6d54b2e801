"""The Dataflow Model paper's running example (section 2.4) under each of its figures'
windowing and trigger variants, drawn from real runs.

    python -m headrace.examples.paper_figures [--output DIR] [--runner LocalRunner|SparkRunner]
        [--format svg|png|html]

Ten integers of one key, 5, 7, 3, 4, 3, 8, 9, 3, 8, 1 (51 in all), arrive at the processing
times and with the event times below, the watermark advancing as a heuristic one does (the 9
arrives behind it); the integer-sum pipeline (`CombinePerKey(sum)`) runs once per figure, on a
TestStream of its own, with `--record_panes`; each figure's pane diagram (`headrace.diagram`)
is written to DIR/figure-N.FORMAT. docs/diagrams.md shows them.

* Figure 7: the global window, a pane at each one-minute processing-time boundary, accumulating.
* Figure 8: the same, discarding.
* Figure 9: the global window, a pane every two elements, discarding.
* Figure 12: two-minute fixed windows, a pane when the watermark passes the window and one per
  late element after it, accumulating.
* Figure 13: the same with early panes each minute of processing time before the watermark.
* Figure 14: sessions with a one-minute gap, early and late panes, accumulating and retracting.

Figures 10 and 11 show the pipeline of Figure 12 on a batch and a micro-batch engine: they are
about the engine, not the pipeline, and are not drawn here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List, Optional, Tuple

import headrace as beam
from headrace.testing.test_stream import TestStream
from headrace.transforms import trigger, window

#: (value, event time, processing time), in seconds after 12:00, in the order they arrive; in
#: two-minute windows they sum to 14, 22, 3 and 12
PAPER = [(5, 26, 130), (7, 130, 180), (3, 185, 220), (4, 165, 250), (3, 270, 300), (8, 210, 330),
         (9, 50, 400), (3, 400, 440), (8, 430, 470), (1, 380, 500)]
#: (the watermark, the processing time it moves there at)
WATERMARK = [(60, 150), (130, 240), (310, 360), (370, 420), (490, 510)]

_ACC = trigger.AccumulationMode.ACCUMULATING
_DIS = trigger.AccumulationMode.DISCARDING
_RET = trigger.AccumulationMode.ACCUMULATING_AND_RETRACTING


def _early_late() -> Any:
    return trigger.AfterWatermark(early=trigger.AfterProcessingTime(60), late=trigger.AfterCount(1))


#: figure number -> (what it shows, WindowFn, trigger, accumulation mode)
FIGURES: Dict[int, Tuple[str, Any, Any, Any]] = {
    7: ("global window, a pane each minute of processing time, accumulating",
        window.GlobalWindows(), trigger.Repeatedly(trigger.AtPeriod(60)), _ACC),
    8: ("global window, a pane each minute of processing time, discarding",
        window.GlobalWindows(), trigger.Repeatedly(trigger.AtPeriod(60)), _DIS),
    9: ("global window, a pane every two elements, discarding",
        window.GlobalWindows(), trigger.Repeatedly(trigger.AfterCount(2)), _DIS),
    12: ("two-minute windows, a pane at the watermark and one per late element, accumulating",
         window.FixedWindows(120), trigger.AfterWatermark(late=trigger.AfterCount(1)), _ACC),
    13: ("two-minute windows, early panes each minute, on time and late, accumulating",
         window.FixedWindows(120), None, _ACC),
    14: ("sessions (one-minute gap), early, on-time and late panes, accumulating and retracting",
         window.Sessions(60), None, _RET),
}


def paper_stream() -> TestStream:
    """The paper's inputs as a TestStream: each value at its processing time (of key "k"), the
    watermark moving as `WATERMARK` says, then to the end of time."""
    ts = TestStream().advance_watermark_to(0)
    now = 0
    events: List[Tuple[int, int, Any]] = [(p, 1, (v, t)) for v, t, p in PAPER]
    events += [(p, 0, wm) for wm, p in WATERMARK]
    for at, kind, what in sorted(events, key=lambda e: (e[0], e[1])):
        if at > now:
            ts = ts.advance_processing_time(at - now)
            now = at
        if kind == 0:
            ts = ts.advance_watermark_to(what)
        else:
            value, event_time = what
            ts = ts.add_elements([window.TimestampedValue(("k", value), event_time)])
    return ts.advance_watermark_to_infinity()


def step_label(figure: int) -> str:
    """The label of figure `figure`'s grouping step."""
    return f"Figure{figure}/Sum"


def add_figure(p: Any, figure: int) -> Any:
    """Adds figure `figure`'s pipeline (its own TestStream) to `p`; returns its sums."""
    _, windowfn, trig, mode = FIGURES[figure]
    return (p | f"Figure{figure}/Input" >> paper_stream()
            | f"Figure{figure}/Window" >> beam.WindowInto(
                windowfn, trigger=trig if trig is not None else _early_late(),
                accumulation_mode=mode, allowed_lateness=600)
            | step_label(figure) >> beam.CombinePerKey(sum))


def run(recording: str, options: Optional[List[str]] = None,
        figures: Optional[List[int]] = None) -> List[int]:
    """Runs the figures' pipelines (all of them, or `figures`) with
    `--record_panes=recording` and the extra `options` flags; returns the figure numbers.

    On the Spark runner they run as one pipeline, one streaming query (its independent parts
    each keep their own processing time and watermarks); on the local runner, whose virtual
    clock is one per pipeline, as a pipeline each."""
    from headrace.options.pipeline_options import PipelineOptions, StandardOptions
    chosen = sorted(figures or FIGURES)
    flags = ["--streaming", f"--record_panes={recording}"] + list(options or [])
    runner = PipelineOptions(flags).view_as(StandardOptions).runner or "LocalRunner"
    groups = [chosen] if runner == "SparkRunner" else [[f] for f in chosen]
    for group in groups:
        with beam.Pipeline(options=PipelineOptions(flags)) as p:
            for figure in group:
                add_figure(p, figure)
    return chosen


def draw_all(recording: str, output: str, fmt: str = "svg",
             figures: Optional[List[int]] = None) -> List[str]:
    """Draws the figures (all, or `figures`) recorded in `recording` to `output`/figure-N.`fmt`;
    returns the files."""
    from headrace import diagram
    os.makedirs(output, exist_ok=True)
    written = []
    for figure in sorted(figures or FIGURES):
        what = FIGURES[figure][0]
        path = os.path.join(output, f"figure-{figure}.{fmt}")
        diagram.draw(recording, step_label(figure), "k", output=path,
                     title=f"Figure {figure}: {what}")
        written.append(path)
    return written


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the figures and writes their diagrams (see the module doc)."""
    parser = argparse.ArgumentParser(prog="python -m headrace.examples.paper_figures",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default="paper-figures", help="where the diagrams go")
    parser.add_argument("--runner", default="LocalRunner", help="LocalRunner or SparkRunner")
    parser.add_argument("--format", default="svg", choices=["svg", "png", "html"])
    args, rest = parser.parse_known_args(argv)
    recording = tempfile.mkdtemp(prefix="headrace-paper-figures-")
    try:
        run(recording, [f"--runner={args.runner}"] + rest)
        for path in draw_all(recording, args.output, args.format):
            print(path)
    finally:
        shutil.rmtree(recording, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
