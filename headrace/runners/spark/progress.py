"""Progress on the terminal while a Spark run runs.

* A batch run (`BatchProgress`): a live display, redrawn a few times a second from Spark's
  status tracker (`SparkContext.statusTracker()`): the run's tasks done of its tasks so far,
  the records its reads produced (counted by headrace, as their tasks end), the elapsed time
  and an estimate of the time left, and a line per running stage, named after the pipeline's
  steps, with its tasks done of total. On Spark Connect, which has no status tracker, from the
  session's progress handler: tasks done of total and bytes read, per stage (a stage Spark
  skipped left out). Drawn with `rich` on standard error.
* A streaming run (`streaming.result.BatchLines`): one line per micro-batch on standard error:
  batch id, the records its reads produced and their rate (Spark's input rows and rows per
  second when it has no splittable or unbounded read), each source's watermark, late elements
  dropped so far and rows in state (figures `PipelineResult.metrics()` reads too).

Both are quiet unless standard error is a terminal, and with `--no_progress`.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional

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
    that does nothing when `enabled` is false.

    `sc` is a SparkContext, whose status tracker names the run's stages, or, on Spark Connect,
    the batch runner's `frames.FrameContext`, whose session's progress handler reports the
    stages of its operations (Spark Connect has no status tracker: no step names there, and
    the bytes its stages read). `records` reads how many records the run's reads produced so
    far (updated as their tasks end), or is None."""

    def __init__(self, sc: Any, group: str, title: str, enabled: bool,
                 records: Optional[Callable[[], int]] = None) -> None:
        self.sc = sc
        self.group = group
        self.title = title
        self.records = records
        self.connect = getattr(sc, "spark", None) if not hasattr(sc, "statusTracker") else None
        self.enabled = enabled and (hasattr(sc, "statusTracker") or
                                    hasattr(self.connect, "registerProgressHandler"))
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._live: Any = None
        self._start = 0.0
        self._operations: Dict[str, Dict[int, Any]] = {}   # Spark Connect: by operation id
        self._read_bytes = 0

    def __enter__(self) -> "BatchProgress":
        if not self.enabled:
            return self
        from rich.console import Console
        from rich.live import Live
        self._start = time.monotonic()
        if self.connect is not None:
            self.connect.registerProgressHandler(self._on_connect_progress)
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
        if self.connect is not None:
            self.connect.removeProgressHandler(self._on_connect_progress)
        self._live.update(self._render(self._stages(), done=exc[0] is None))
        self._live.__exit__(*exc)

    def _loop(self) -> None:
        while not self._stop.wait(_REFRESH_SECONDS):
            try:
                self._live.update(self._render(self._stages()))
            except Exception:   # a context being stopped: the run reports its own error
                return

    def _on_connect_progress(self, stages: Any, inflight_tasks: int, operation_id: Any,
                             done: bool) -> None:
        """Spark Connect's progress handler: an operation's stages as the server reports them
        (an error raised here would fail the operation: none is)."""
        try:
            known = self._operations.setdefault(str(operation_id), {})
            for st in stages or ():
                active = 1 if inflight_tasks and not (st.done or done) else 0
                known[st.stage_id] = (f"stage {st.stage_id}", int(st.num_tasks),
                                      int(st.num_completed_tasks), active, int(st.num_bytes_read),
                                      bool(st.done))
        except Exception:   # (a report of another shape: the display misses it)
            pass

    def _stages(self) -> Dict[Any, Any]:
        """The run's stages Spark knows of: (name, tasks, done, active), by id."""
        if self.connect is not None:
            stages = {(op, sid): st for op, known in list(self._operations.items())
                      for sid, st in _ran(dict(known)).items()}
            self._read_bytes = sum(st[4] for st in stages.values())
            return {k: st[:4] for k, st in stages.items()}
        tracker = self.sc.statusTracker()
        found: Dict[Any, Any] = {}
        for job in tracker.getJobIdsForGroup(self.group):
            info = tracker.getJobInfo(job)
            for sid in (info.stageIds if info is not None else []):
                s = tracker.getStageInfo(sid)
                if s is not None:
                    found[sid] = (s.name, s.numTasks, s.numCompletedTasks, s.numActiveTasks)
        return found

    def _read(self, elapsed: float) -> str:
        """What the run read so far: its reads' records (and their rate), or the bytes its
        stages read (Spark Connect), or nothing to say."""
        n = self.records() if self.records is not None else 0
        if n:
            return f", {n:,} records read ({n / max(elapsed, 1e-3):,.0f}/s)"
        if self._read_bytes:
            return f", {self._read_bytes / 2**20:,.1f} MiB read"
        return ""

    def _render(self, stages: Dict[Any, Any], done: bool = False) -> Any:
        from rich.table import Table
        from rich.text import Text
        total = sum(t for _, t, _, _ in stages.values())
        finished = sum(d for _, _, d, _ in stages.values())
        elapsed = time.monotonic() - self._start
        read = self._read(elapsed)
        left = ""
        if 0 < finished < total and not done:
            left = f", about {_clock(elapsed * (total - finished) / finished)} left"
        table = Table.grid(padding=(0, 1))
        if done:   # (a stage Spark skipped, its shuffle output reused, never ran its tasks)
            table.add_row(Text(f"{self.title}: done, {finished:,} tasks{read}, {_clock(elapsed)}",
                               style="bold"))
            return table
        table.add_row(Text(f"{self.title}: running, {finished:,}/{total:,} tasks{read}, "
                           f"{_clock(elapsed)}{left}", style="bold"))
        running: List[Any] = [s for s in stages.values() if s[3] > 0 or 0 < s[2] < s[1]]
        for name, tasks, completed, active in running[:8]:
            table.add_row(Text(f"  {_short(name)}: {completed}/{tasks} tasks"
                               + (f" ({active} running)" if active and self.connect is None else "")))
        return table


def _ran(stages: Dict[int, Any]) -> Dict[int, Any]:
    """An operation's stages (Spark Connect's reports, by id) without those Spark skipped: a
    stage never started that a later stage of the operation has passed (a skipped stage, its
    shuffle output reused, is never reported done)."""
    passed = max((sid for sid, st in stages.items() if st[2] > 0 or st[5]), default=-1)
    return {sid: st for sid, st in stages.items() if st[2] > 0 or st[5] or sid > passed}


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
