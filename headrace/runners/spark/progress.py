"""Progress on the terminal while a Spark run runs.

* A batch run (`BatchProgress`): a live display, redrawn a few times a second from Spark's
  status tracker (`SparkContext.statusTracker()`): the run's tasks done of its tasks so far,
  the elapsed time and an estimate of the time left, and a line per running stage, named after
  the pipeline's steps, with its tasks done of total. Drawn with `rich` on standard error.
* A streaming run (`streaming.result.BatchLines`): one line per micro-batch on standard error:
  batch id, Spark's input rows and rows per second, each grouping's input watermark, late
  elements dropped so far and rows in state (figures `PipelineResult.metrics()` reads too).

Both are quiet unless standard error is a terminal, and with `--no_progress`. Spark Connect
has no status tracker: a batch run there shows no live display.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Dict, List, Optional

_REFRESH_SECONDS = 0.25


def wanted(options: Any, stream: Any = None) -> bool:
    """Whether to show progress: standard error (or `stream`) is a terminal and
    `--no_progress` is not given."""
    from headrace.options.pipeline_options import SparkRunnerOptions
    if options.view_as(SparkRunnerOptions).no_progress:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class BatchProgress:
    """The live display of one batch run's Spark jobs (job group `group`); a context manager
    that does nothing when `enabled` is false or the context has no status tracker."""

    def __init__(self, sc: Any, group: str, title: str, enabled: bool) -> None:
        self.sc = sc
        self.group = group
        self.title = title
        self.enabled = enabled and hasattr(sc, "statusTracker")
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._live: Any = None
        self._start = 0.0

    def __enter__(self) -> "BatchProgress":
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.live import Live
        self._start = time.monotonic()
        self._live = Live(self._render({}), console=Console(file=sys.stderr), transient=False,
                          refresh_per_second=1 / _REFRESH_SECONDS)
        self._live.__enter__()
        self._thread = threading.Thread(target=self._loop, name="headrace-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._live.update(self._render(self._stages(), done=exc[0] is None))
        self._live.__exit__(*exc)

    def _loop(self) -> None:
        while not self._stop.wait(_REFRESH_SECONDS):
            try:
                self._live.update(self._render(self._stages()))
            except Exception:   # a context being stopped: the run reports its own error
                return

    def _stages(self) -> Dict[int, Any]:
        """The run's stages Spark knows of, by id: (name, tasks, done, active)."""
        tracker = self.sc.statusTracker()
        stages: Dict[int, Any] = {}
        for job in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job)
            for sid in (info.stageIds if info is not None else []):
                s = tracker.getStageInfo(sid)
                if s is not None:
                    stages[sid] = (s.name, s.numTasks, s.numCompletedTasks, s.numActiveTasks)
        return stages

    def _render(self, stages: Dict[int, Any], done: bool = False) -> Any:
        from rich.table import Table
        from rich.text import Text
        total = sum(t for _, t, _, _ in stages.values())
        finished = sum(d for _, _, d, _ in stages.values())
        elapsed = time.monotonic() - self._start
        left = ""
        if 0 < finished < total and not done:
            left = f", about {_clock(elapsed * (total - finished) / finished)} left"
        table = Table.grid(padding=(0, 1))
        if done:   # (a stage Spark skipped, its shuffle output reused, never ran its tasks)
            table.add_row(Text(f"{self.title}: done, {finished:,} tasks, {_clock(elapsed)}",
                               style="bold"))
            return table
        table.add_row(Text(f"{self.title}: running, {finished:,}/{total:,} tasks, "
                           f"{_clock(elapsed)}{left}", style="bold"))
        running: List[Any] = [s for s in stages.values() if s[3] > 0 or 0 < s[2] < s[1]]
        for name, tasks, completed, active in running[:8]:
            table.add_row(Text(f"  {_short(name)}: {completed}/{tasks} tasks"
                               + (f" ({active} running)" if active else "")))
        return table


def _short(name: str, width: int = 90) -> str:
    name = name[len("headrace: "):] if name.startswith("headrace: ") else name
    return name if len(name) <= width else name[:width - 3] + "..."


def _clock(seconds: float) -> str:
    s = int(seconds)
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def field(report: Any, name: str) -> Any:
    """A field of a streaming progress report: a dict, or PySpark's progress objects (classic or
    Spark Connect), which answer `report[name]` or have it as an attribute; None when absent."""
    try:
        value = report[name]
    except (KeyError, TypeError, IndexError):
        value = None
    if value is None:
        value = getattr(report, name, None)
    return value
