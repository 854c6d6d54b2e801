"""The run report: `--report=DIR` writes DIR/index.html, one self-contained page about a run.

The page shows the pipeline graph (every primitive step, its fused stage, the groupings; each
edge labelled with the elements that went along it), every metric and user counter, the
dead-letter outputs' counts with the last error, the late data each grouping dropped, for a
streaming run its micro-batches (input rows per second, batch durations, each grouping's
watermark lag, late drops, as plots) and links to the pane diagrams of a run that recorded them
(`--record_panes`). A batch run writes it when it ends (also when it fails); a streaming run
when it starts, at most every `--report_refresh_seconds` while it runs (the page reloads
itself) and when it ends. DIR/report.json holds the same data; `headrace report DIR` renders
the page again and opens it in a browser.

`Pipeline.run` finds `RunReport` by name (`REPORTER`), so nothing below the runners imports it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from headrace.report import data as report_data
from headrace.report.page import render

__all__ = ["RunReport", "render", "write"]


def write(directory: str, content: Dict[str, Any]) -> str:
    """Writes `content` as DIR/report.json and its page DIR/index.html (each replaced whole, so
    a browser never reads half a page); returns the page's path."""
    os.makedirs(directory, exist_ok=True)
    page = os.path.join(directory, "index.html")
    for name, text in (("report.json", json.dumps(content, indent=1, default=str)),
                       ("index.html", render(content))):
        path = os.path.join(directory, name)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    return page


class RunReport:
    """The report of one run (see the module doc): `attach` it to the run's result; a streaming
    result calls `poll` as it waits and `finish` when the run ends."""

    def __init__(self, pipeline: Any, options: Any) -> None:
        self.directory = str(options.report)
        self.refresh = float(getattr(options, "report_refresh_seconds", 5.0) or 5.0)
        self.record_dir = getattr(options, "record_panes", None)
        runner = pipeline.runner if isinstance(pipeline.runner, str) else type(pipeline.runner).__name__
        self.run: Dict[str, Any] = {
            "name": getattr(options, "job_name", None) or os.path.basename(sys.argv[0] or "pipeline"),
            "runner": str(runner or "LocalRunner"), "state": "RUNNING", "started": time.time(),
            "updated": time.time(), "elapsed_s": 0.0, "refresh_seconds": self.refresh, "error": None}
        self.graph = report_data.graph(pipeline)
        self.batches: List[Dict[str, Any]] = []
        self._written = 0.0
        self._finished = False

    def _content(self, result: Any, final: bool) -> Dict[str, Any]:
        self.run["updated"] = time.time()
        self.run["elapsed_s"] = self.run["updated"] - self.run["started"]
        metrics = report_data.metrics(result) if result is not None else []
        return {"run": dict(self.run), "graph": self.graph, "metrics": metrics,
                "summary": report_data.summary(metrics), "batches": self.batches,
                "diagrams": report_data.diagrams(self.record_dir, self.directory) if final else []}

    def attach(self, result: Any) -> None:
        """Called with the run's result: writes the final report of a run that has ended, or
        the first of a streaming run (whose result then polls this report as it waits)."""
        if _state_name(result) == "RUNNING" and hasattr(result, "reporter"):
            result.reporter = self
            self.write(result, final=False)
        else:
            self.finish(result)

    def poll(self, result: Any) -> None:
        """When `--report_refresh_seconds` have passed since the page was last written, takes
        in the micro-batches reported since and writes it again (Spark keeps the last 100
        batches' reports, so a refresh over 100 batches' time leaves the older ones out)."""
        if time.monotonic() - self._written >= self.refresh:
            self._take_batches(result)
            self.write(result, final=False)

    def _take_batches(self, result: Any) -> None:
        after = self.batches[-1]["batch"] if self.batches else -1
        try:
            self.batches.extend(result.batch_records(after))
        except Exception:   # a query whose session is gone: nothing more to take
            pass

    def finish(self, result: Any, error: Optional[BaseException] = None) -> None:
        """Writes the final report (once): the run's state, its error if it failed."""
        if self._finished:
            return
        self._finished = True
        if result is not None and hasattr(result, "batch_records"):
            self._take_batches(result)
        self.run["state"] = "FAILED" if error is not None else _state_name(result)
        if error is not None:
            self.run["error"] = f"{type(error).__name__}: {error}"
        elif getattr(result, "error", None) is not None:
            self.run["error"] = f"{type(result.error).__name__}: {result.error}"
        self.write(result, final=True)

    def write(self, result: Any, final: bool) -> None:
        """Writes report.json and index.html now."""
        write(self.directory, self._content(result, final))
        self._written = time.monotonic()


def _state_name(result: Any) -> str:
    """The run's state by name (DONE, FAILED, RUNNING, ...), from its result's public `state`."""
    state = result.state
    return str(getattr(state, "value", state))


def main(argv: Optional[List[str]] = None) -> int:
    """`headrace report DIR [--no-open]`: renders DIR/index.html again from DIR/report.json and
    opens it in a browser."""
    import argparse
    parser = argparse.ArgumentParser(prog="headrace report",
                                     description="Render a run report (written with --report=DIR) "
                                                 "again and open it in a browser.")
    parser.add_argument("directory", help="the --report directory")
    parser.add_argument("--no-open", action="store_true", help="only render the page")
    args = parser.parse_args(argv)
    source = os.path.join(args.directory, "report.json")
    if not os.path.isfile(source):
        print(f"headrace report: {source} does not exist; run the pipeline with "
              f"--report={args.directory} first")
        return 2
    with open(source, encoding="utf-8") as fh:
        content = json.load(fh)
    page = write(args.directory, content)
    print(f"headrace report: wrote {page}")
    if not args.no_open:
        import webbrowser
        if not webbrowser.open("file://" + os.path.abspath(page)):
            print("headrace report: no browser to open it with here; open the file above")
    return 0
