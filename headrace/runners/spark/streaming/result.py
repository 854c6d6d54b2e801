"""A streaming query's result (`StreamingPipelineResult`: wait, cancel, state, metrics) and the
query's progress reports as metrics (`progress_metrics`)."""

from __future__ import annotations

import threading
import time
from typing import Any, Optional

from headrace.metrics.metric import MetricResults, MetricsContainer
from headrace.pipeline.pipeline import PipelineResult, PipelineState
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.streaming.errors import query_error

_POLL_SECONDS = 0.2


class StreamingPipelineResult(PipelineResult):
    """A running streaming query's result: wait for it, cancel it, read its metrics."""

    def __init__(self, query: Any, files: RunFiles, n_groupings: int, checkpoint: str,
                 live: bool = False) -> None:
        super().__init__(PipelineState.RUNNING)
        self.query = query
        self.files = files
        self.n_groupings = n_groupings
        self.checkpoint = checkpoint
        self.live = live   # a processing-time trigger: the query is stopped when it has finished
        self._lock = threading.Lock()
        self._progress: Optional[MetricsContainer] = None   # the progress metrics once it ended

    @property
    def state(self) -> PipelineState:
        """RUNNING while the query runs; DONE, FAILED or CANCELLED after."""
        self._refresh()
        return self._state

    def _refresh(self) -> None:
        if self._state != PipelineState.RUNNING:
            return
        if self.query.isActive:
            if not self._finished():
                return
            self.query.stop()
        exc = self.query.exception()
        if exc is None:
            self._state = PipelineState.DONE
        else:
            self._state = PipelineState.FAILED
            self._error = query_error(exc)

    def wait_until_finish(self, duration: Optional[float] = None) -> PipelineState:
        """Blocks until the query ends (or `duration` seconds pass); raises its error if it failed."""
        try:
            if not self.live:
                if duration is None:
                    self.query.awaitTermination()
                else:
                    self.query.awaitTermination(duration)
            else:  # sources that may grow: the query runs until the driver sees the end
                deadline = None if duration is None else time.monotonic() + duration
                while not self.query.awaitTermination(_POLL_SECONDS) and not self._finished():
                    if deadline is not None and time.monotonic() >= deadline:
                        break
        except Exception as exc:
            self._state = PipelineState.FAILED
            self._error = query_error(exc)
        self._refresh()
        if self._error is not None:
            raise self._error
        return self._state

    def _finished(self) -> bool:
        """True when the source has seen the end of everything and the last batch committed."""
        n = self.files.finished_batch()
        return n is not None and self.files.batch_state(n, self.n_groupings) is not None

    def cancel(self) -> PipelineState:
        """Stops the query (a restart with the same checkpoint location resumes it)."""
        if self.query.isActive:
            self.query.stop()
            self._state = PipelineState.CANCELLED
        return self.state

    def metrics(self) -> Any:
        """The committed metrics of every batch so far (attempted: also failed bundle attempts),
        and the query's own from its progress reports (namespace `PROGRESS_NAMESPACE`)."""
        last = self.files.last_batch()
        state = self.files.batch_state(last, self.n_groupings) if last >= 0 else None
        committed, attempted = MetricsContainer(), MetricsContainer()
        if state is not None and state.metrics is not None:
            committed.merge(state.metrics[0])
            attempted.merge(state.metrics[1])
        progress = self._progress
        if progress is None:
            progress = progress_metrics(self.query)
            if not self.query.isActive:  # final: read Spark's reports once
                self._progress = progress
        committed.merge(progress)
        attempted.merge(progress)
        return MetricResults(committed, attempted)


PROGRESS_NAMESPACE = "headrace.spark_streaming"


def _field(report: Any, name: str) -> Any:
    """A field of a progress report: a dict, or PySpark's progress objects (classic or Spark
    Connect), which answer `report[name]` or have it as an attribute; None when absent."""
    try:
        value = report[name]
    except (KeyError, TypeError, IndexError):
        value = None
    if value is None:
        value = getattr(report, name, None)
    return value


def progress_metrics(query: Any) -> MetricsContainer:
    """The streaming query's progress reports as metrics (step: the query's name, or "query"):
    gauges `batches` (micro-batches run) and `state_rows` (rows in the stateful operators'
    state after the last batch), and, over the batches Spark still reports
    (spark.sql.streaming.numRecentProgressUpdates, default 100), distributions
    `batch_duration_ms` and `input_rows_per_batch`."""
    out = MetricsContainer()
    try:
        reports = list(query.recentProgress)
        step = query.name or "query"
    except Exception:  # a query whose session is gone
        return out
    for pr in reports:
        duration = (_field(pr, "durationMs") or {}).get("triggerExecution")
        if duration is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "batch_duration_ms", int(duration))
        rows_in = _field(pr, "numInputRows")
        if rows_in is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "input_rows_per_batch",
                       int(rows_in))
    if reports:
        last = reports[-1]
        batch = _field(last, "batchId")
        if batch is not None:
            out.update("gauge", step, PROGRESS_NAMESPACE, "batches", int(batch) + 1)
        ops = _field(last, "stateOperators") or []
        out.update("gauge", step, PROGRESS_NAMESPACE, "state_rows",
                   sum(int(_field(op, "numRowsTotal") or 0) for op in ops))
    return out
