"""A streaming query's result (`StreamingPipelineResult`: wait, cancel, state, metrics) and the
query's progress reports as metrics (`progress_metrics`)."""

from __future__ import annotations

import datetime
import functools
import json
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from headrace.metrics.metric import MetricResults, MetricsContainer
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.runners.kit.grouping import DROPPED_LATE
from headrace.runners.kit.plan import Kind
from headrace.pipeline.pipeline import PipelineResult, PipelineState
from headrace.runners.spark.progress import field
from headrace.runners.spark.streaming.checkpoint import RunFiles
from headrace.runners.spark.streaming.errors import query_error
from headrace.runners.spark.streaming.scripts import SOURCES

_POLL_SECONDS = 0.2


class StreamingPipelineResult(PipelineResult):
    """A running streaming query's result: wait for it, cancel it, read its metrics."""

    def __init__(self, query: Any, files: RunFiles, n_groupings: int, checkpoint: str,
                 live: bool = False, lines: Optional["BatchLines"] = None,
                 labels: Optional[Dict[int, str]] = None,
                 sources: Optional[SourceMarks] = None, reads: bool = False) -> None:
        super().__init__(PipelineState.RUNNING)
        self.reads = reads   # the pipeline has splittable or unbounded reads (their records per batch)
        self.labels = labels or {}   # grouping index -> step label
        self.sources = sources       # each source step's watermark after a batch (`SourceMarks`)
        self.lines = lines   # a line per micro-batch on the terminal (`BatchLines`), if shown
        self.query = query
        self.files = files
        self.n_groupings = n_groupings
        self.checkpoint = checkpoint
        self.live = live   # a processing-time trigger: the query is stopped when it has finished
        self._lock = threading.Lock()
        self._progress: Optional[MetricsContainer] = None   # the progress metrics once it ended
        #: the run report (`headrace.report.RunReport`, --report), polled as the run is waited for
        self.reporter: Any = None

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
            if not self.live and self.lines is None and self.reporter is None:
                if duration is None:
                    self.query.awaitTermination()
                else:
                    self.query.awaitTermination(duration)
            else:  # sources that may grow (the query runs until the driver sees the end), or a
                # line per micro-batch to print as it ends
                deadline = None if duration is None else time.monotonic() + duration
                while not self.query.awaitTermination(_POLL_SECONDS) and not (
                        self.live and self._finished()):
                    if self.lines is not None:
                        self.lines.poll()
                    if self.reporter is not None:
                        self.reporter.poll(self)
                    if deadline is not None and time.monotonic() >= deadline:
                        break
                if self.lines is not None:
                    self.lines.poll()
        except Exception as exc:
            self._state = PipelineState.FAILED
            self._error = query_error(exc)
        self._refresh()
        if self.reporter is not None and self._state != PipelineState.RUNNING:
            self.reporter.finish(self)
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
            if self.reporter is not None:
                self.reporter.finish(self)
        return self.state

    def batch_records(self, after: int) -> List[Dict[str, Any]]:
        """The micro-batches Spark reported after batch `after`, as plain data (the run
        report's): batch, time (its start, seconds since the epoch), rows, rows_per_second,
        duration_s, watermarks (`watermark_lags`: each grouping's), source_watermarks (each
        source step's, `source_lags`), late_dropped (so far), records_read (the records the
        splittable and unbounded reads produced in the batch: `batch_counts`; None without such
        reads) and state_rows."""
        out = []
        for report in reports_after(self.query, after):
            batch, rows, rate, seconds = batch_figures(report)
            late, read = batch_counts(self.files, batch, self.n_groupings)
            stamp = field(report, "timestamp")
            try:
                start = datetime.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
            except ValueError:
                start = None
            out.append({
                "batch": batch, "time": start, "rows": rows, "rows_per_second": rate,
                "duration_s": seconds, "watermarks": watermark_lags(report, self.labels),
                "source_watermarks": source_lags(report, self.sources),
                "late_dropped": late, "records_read": read if self.reads else None,
                "state_rows": state_rows(report)})
        return out

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
            read = (functools.partial(records_read, self.files, n_groupings=self.n_groupings)
                    if self.reads else None)
            progress = progress_metrics(self.query, self.labels, self.sources, read)
            if not self.query.isActive:  # final: read Spark's reports once
                self._progress = progress
        committed.merge(progress)
        attempted.merge(progress)
        return MetricResults(committed, attempted)


PROGRESS_NAMESPACE = "headrace.spark_streaming"
#: the counter of the records a splittable step or an unbounded Read produced, per step and
#: batch, in that namespace (committed with the batch: `records_read`)
ELEMENTS_READ = "elements_read"

#: each source step's (watermark, processing time) after a micro-batch, by step label, from the
#: batch's offset (`source_step_watermarks`)
SourceMarks = Callable[[Any], Dict[str, Tuple[int, int]]]


def progress_metrics(query: Any, labels: Optional[Dict[int, str]] = None,
                     sources: Optional[SourceMarks] = None,
                     read: Optional[Callable[[int], Optional[int]]] = None) -> MetricsContainer:
    """The streaming query's progress reports as metrics (step: the query's name, or "query"):
    gauges `batches` (micro-batches run) and `state_rows` (rows in the stateful operators'
    state after the last batch), and, over the batches Spark still reports
    (spark.sql.streaming.numRecentProgressUpdates, default 100), distributions
    `batch_duration_ms`, `input_rows_per_batch` and `input_rows_per_second`; and per grouping
    step (`labels`: by grouping index), the gauge `input_watermark_us`, its input watermark in
    the last batch (headrace's, from the batch's offset), and per source step the gauge
    `source_watermark_us`, its watermark after the last batch (`sources`), as the per-batch
    lines show them; with `read` (the records the splittable and unbounded reads produced in a
    batch, by batch id; None once the batch's driver state is dropped), the distributions
    `records_read_per_batch` and `records_read_per_second` over the batches it knows."""
    out = MetricsContainer()
    try:
        reports = list(query.recentProgress)
        step = query.name or "query"
    except Exception:  # a query whose session is gone
        return out
    for pr in reports:
        duration = (field(pr, "durationMs") or {}).get("triggerExecution")
        if duration is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "batch_duration_ms", int(duration))
        batch = field(pr, "batchId")
        n = read(int(batch)) if read is not None and batch is not None else None
        if n is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "records_read_per_batch", n)
            if duration:
                out.update("distribution", step, PROGRESS_NAMESPACE, "records_read_per_second",
                           int(round(n * 1000 / int(duration))))
        rows_in = field(pr, "numInputRows")
        if rows_in is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "input_rows_per_batch",
                       int(rows_in))
        rate = field(pr, "processedRowsPerSecond")
        if rate is not None:
            out.update("distribution", step, PROGRESS_NAMESPACE, "input_rows_per_second",
                       int(round(float(rate))))
    if reports:
        last = reports[-1]
        batch = field(last, "batchId")
        if batch is not None:
            out.update("gauge", step, PROGRESS_NAMESPACE, "batches", int(batch) + 1)
        out.update("gauge", step, PROGRESS_NAMESPACE, "state_rows", state_rows(last))
        for g, wm in enumerate(input_watermarks(last)):
            out.update("gauge", (labels or {}).get(g, str(g)), PROGRESS_NAMESPACE,
                       "input_watermark_us", int(wm))
        for label, (wm, _) in source_marks(last, sources).items():
            out.update("gauge", label, PROGRESS_NAMESPACE, "source_watermark_us", int(wm))
    return out


def state_rows(report: Any) -> int:
    """The rows in the stateful operators' state after a micro-batch (Spark's rows: buckets,
    not keys)."""
    return sum(int(field(op, "numRowsTotal") or 0) for op in field(report, "stateOperators") or [])


def batch_offset(report: Any) -> Any:
    """headrace's offset (`offsets.Offset`) after the micro-batch of a progress report, or None."""
    from headrace.runners.spark.streaming.offsets import Offset
    for source in field(report, "sources") or []:
        end = field(source, "endOffset")
        try:
            return Offset.from_json(json.loads(end) if isinstance(end, str) else end)
        except Exception:   # another source's offset
            continue
    return None


def source_step_watermarks(coordinator: Any, labels: Dict[int, str], offset: Any
                           ) -> Dict[str, Tuple[int, int]]:
    """Each source step's (watermark, processing time) after the micro-batch that ended at
    `offset` (`offsets.Offset`), by step label, as the query's `coordinator.Coordinator`
    computes them: a TestStream's (its outputs' earliest), an unbounded Read's, a Create's; a
    source read by splittable DoFns only (a bounded Read, a connector's restrictions) is shown
    by its readers' output watermarks (`labels`: grouping and splittable step labels by index)."""
    wms = coordinator.source_watermarks(offset.positions)
    readers: Dict[int, set] = {}
    for node in coordinator.nodes:
        for pc in node.inputs:
            readers.setdefault(pc, set()).add(node.kind)
    out: Dict[str, Tuple[int, int]] = {}
    for node in coordinator.nodes:
        if node.kind in SOURCES and not all(readers.get(pc) == {Kind.SPLITTABLE}
                                            for pc in node.outputs):
            now = offset.island_processing_times[coordinator.source_island[node.ref]]
            out[coordinator.labels.get(node.ref, f"source {node.ref}")] = (
                min((wms[pc] for pc in node.outputs), default=MAX_TIMESTAMP_MICROS), now)
        elif node.kind is Kind.SPLITTABLE:
            out[labels.get(node.ref, f"read {node.ref}")] = (
                offset.output_watermarks[node.ref], offset.processing_times[node.ref])
    return out


def source_marks(report: Any, sources: Optional[SourceMarks]) -> Dict[str, Tuple[int, int]]:
    """Each source step's (watermark, processing time) after the micro-batch of a progress
    report, by label; {} without `sources` or headrace's offset."""
    offset = batch_offset(report)
    return {} if offset is None or sources is None else sources(offset)


def input_watermarks(report: Any) -> List[int]:
    """Each grouping's input watermark in a micro-batch (by grouping index), from headrace's
    offset in the batch's progress report; [] when it has none."""
    offset = batch_offset(report)
    return [] if offset is None else list(offset.input_watermarks)


class BatchLines:
    """One line per micro-batch on standard error (`progress`): batch id, the records the
    pipeline's splittable and unbounded reads produced in it and their rate (`reads`; else
    Spark's input rows and rows per second), the batch's time, each source step's watermark
    after it (headrace's, from the batch's offset: `sources`), the late elements dropped so far
    and the rows in state; `poll` prints the batches reported since its last call."""

    def __init__(self, query: Any, files: RunFiles, n_groupings: int,
                 sources: Optional[SourceMarks], reads: bool = False, stream: Any = None) -> None:
        self.query = query
        self.files = files
        self.n_groupings = n_groupings
        self.sources = sources
        self.reads = reads
        self.stream = sys.stderr if stream is None else stream
        self.last = -1

    def poll(self) -> None:
        """Prints a line for each micro-batch reported since the last call."""
        try:
            reports = reports_after(self.query, self.last)
        except Exception:   # the session is gone: nothing more to report
            return
        for report in reports:
            self.last = int(field(report, "batchId"))
            print(self.line(report), file=self.stream, flush=True)

    def line(self, report: Any) -> str:
        """One micro-batch's report as a line (see the class doc)."""
        batch, rows, rate, seconds = batch_figures(report)
        late, n = batch_counts(self.files, batch, self.n_groupings)
        if self.reads and n is not None:   # the records its reads produced in the batch
            parts = [f"batch {batch}", f"{n:,} records read",
                     f"{n / seconds if seconds else 0.0:,.0f} records/s"]
        else:   # (Spark's input rows: a source's rows, which may each carry many elements)
            parts = [f"batch {batch}", f"{rows:,} input rows", f"{rate:,.0f} rows/s"]
        if seconds is not None:
            parts.append(f"{seconds:.2f} s")
        marks = self._watermarks(report)
        if marks:
            parts.append("watermark " + ", ".join(marks))
        parts.append(f"{late:,} late dropped")
        parts.append(f"{state_rows(report):,} state rows")
        return "headrace: " + ", ".join(parts)

    def _watermarks(self, report: Any) -> List[str]:
        """Each source step's watermark after the batch (`source_marks`), the first four."""
        marks = source_marks(report, self.sources)
        shown = [f"{label} {_instant(w)}" for label, (w, _) in list(marks.items())[:4]]
        return shown + ([f"{len(marks) - 4} more"] if len(marks) > 4 else [])


def reports_after(query: Any, after: int) -> List[Any]:
    """The query's progress reports of the micro-batches after batch `after`, oldest first
    (those Spark still keeps: spark.sql.streaming.numRecentProgressUpdates, default 100)."""
    return [r for r in list(query.recentProgress)
            if field(r, "batchId") is not None and int(field(r, "batchId")) > after]


def batch_figures(report: Any) -> Tuple[int, int, float, Optional[float]]:
    """A micro-batch's id, Spark's input rows, rows per second and duration in seconds (None
    when not reported), from its progress report."""
    millis = (field(report, "durationMs") or {}).get("triggerExecution")
    return (int(field(report, "batchId")), int(field(report, "numInputRows") or 0),
            float(field(report, "processedRowsPerSecond") or 0.0),
            None if millis is None else int(millis) / 1000)


def watermark_lags(report: Any, labels: Dict[int, str]) -> Dict[str, Dict[str, float]]:
    """Each grouping's input and output watermarks in a micro-batch and how far each lags its
    processing time (a scripted TestStream's clock, else the wall clock), in seconds, by step;
    watermarks at either end of time are left out."""
    offset = batch_offset(report)
    out: Dict[str, Dict[str, float]] = {}
    if offset is None:
        return out
    for g, (now, wm_in, wm_out) in enumerate(zip(offset.processing_times, offset.input_watermarks,
                                                 offset.output_watermarks)):
        entry: Dict[str, float] = {}
        for name, wm in (("input", wm_in), ("output", wm_out)):
            if MIN_TIMESTAMP_MICROS < wm < MAX_TIMESTAMP_MICROS:
                entry[name + "_us"] = wm
                entry[name + "_lag_s"] = (now - wm) / 1e6
        if entry:
            out[labels.get(g, str(g))] = entry
    return out


def source_lags(report: Any, sources: Optional[SourceMarks]) -> Dict[str, Dict[str, float]]:
    """Each source step's watermark after a micro-batch and how far it lags its processing time,
    in seconds (`watermark_lags`' form, as "output"), by step; watermarks at either end of time
    are left out."""
    return {label: {"output_us": wm, "output_lag_s": (now - wm) / 1e6}
            for label, (wm, now) in source_marks(report, sources).items()
            if MIN_TIMESTAMP_MICROS < wm < MAX_TIMESTAMP_MICROS}


def batch_counts(files: RunFiles, batch: int, n_groupings: int) -> Tuple[int, Optional[int]]:
    """(the late elements dropped up to a micro-batch, the records the splittable steps and
    unbounded Reads produced in it), from headrace's committed counters after it and after the
    batch before (`ELEMENTS_READ`); the records are None once either driver state is dropped
    (`RunFiles` keeps the last ten), and the late count then 0."""
    now = _counter_totals(files, batch, n_groupings)
    if now is None:
        return 0, None
    before = _counter_totals(files, batch - 1, n_groupings)
    read = None if before is None else now.get(ELEMENTS_READ, 0) - before.get(ELEMENTS_READ, 0)
    return now.get(DROPPED_LATE, 0), read


def records_read(files: RunFiles, batch: int, n_groupings: int) -> Optional[int]:
    """The records the reads produced in a micro-batch (`batch_counts`)."""
    return batch_counts(files, batch, n_groupings)[1]


def _counter_totals(files: RunFiles, batch: int, n_groupings: int) -> Optional[Dict[str, int]]:
    """headrace's committed counters after a micro-batch, summed by name (None: its driver
    state is not kept)."""
    state = files.batch_state(batch, n_groupings)
    if state is None:
        return None
    totals: Dict[str, int] = {}
    for (kind, _, _, name), v in (state.metrics[0].cells.items() if state.metrics else ()):
        if kind == "counter":
            totals[name] = totals.get(name, 0) + int(v)
    return totals


def _instant(us: int) -> str:
    """A watermark as an ISO 8601 instant (-inf / +inf at the ends of time)."""
    if us <= MIN_TIMESTAMP_MICROS:
        return "-inf"
    if us >= MAX_TIMESTAMP_MICROS:
        return "+inf"
    return datetime.datetime.fromtimestamp(us / 1e6, datetime.timezone.utc).isoformat(
        timespec="seconds").replace("+00:00", "Z")
