"""Pane recording: what a grouping step's per-key core saw and did, written as Parquet files.

Every runner drives one per-key core per grouping step (`kit.grouping.GroupingCore`); with
`--record_panes=DIR` the core hands each event to a `PaneRecorder`, which writes rows of five
kinds to `DIR/<step>/part-*.parquet` (pyarrow), all with the step's label and the processing
time the core was called at:

* ``element``: an input element of a key: its event time, the window it was assigned to, its
  value (a short text, and as a number when it is one);
* ``watermark``: the step's input watermark, each time the core was told a new one;
* ``output_watermark``: the step's output watermark, each time its runner moved it (the local
  runner; Spark streaming, per micro-batch; a Spark batch job has none to record);
* ``pane``: a pane the core fired: key, window, output timestamp, timing (EARLY, ON_TIME,
  LATE), index, first/last, value, whether it is a retraction;
* ``dropped``: an input element the core dropped, as late (behind the watermark by more than
  the allowed lateness) or for a closed window.

`RecordPanes` says what to record: which steps (by label; all grouping steps by default), which
keys (by their `str()`), an event-time range, and at most how many elements per writer (a
writer is one per step and Spark task, or the local runner's). Rows carry a writer id and a
sequence number, so a reader can put each writer's events back in their order; a Spark task
computed again (retried, replayed, recomputed) replaces its own files (`PaneRecorder`), so
each row is recorded once.
`read_panes` reads them back. The recorder imports pyarrow only when it writes.
"""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from headrace.errors import InvalidArgumentError, _short_repr
from headrace.model.reduce import Element, Pane
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS

#: the columns of a recording, in order (`kind` says which are filled)
COLUMNS = ("step", "writer", "seq", "kind", "processing_time_us", "key", "event_time_us",
           "window_start_us", "window_end_us", "value", "value_number", "watermark_us", "timing",
           "pane_index", "nonspeculative_index", "is_first", "is_last", "retraction", "reason")
_VALUE_CHARS = 200      # a value's text is cut to this many characters
_ROWS_PER_FILE = 50_000


class RecordPanes:
    """What `--record_panes` records: the directory, and which steps, keys, event-time range and
    how many elements (per writer) it keeps; `None` keeps all."""

    def __init__(self, directory: str, steps: Optional[Sequence[str]] = None,
                 keys: Optional[Sequence[Any]] = None, start_us: Optional[int] = None,
                 end_us: Optional[int] = None, max_elements: Optional[int] = None) -> None:
        if not directory or not isinstance(directory, str):
            raise InvalidArgumentError(f"record_panes: a directory is needed, got {directory!r}")
        if max_elements is not None and (isinstance(max_elements, bool) or not isinstance(max_elements, int)
                                         or max_elements < 0):
            raise InvalidArgumentError(
                f"record_panes: max_elements must be an int >= 0 or None, got {max_elements!r}")
        self.directory = os.path.abspath(directory)
        self.steps = None if steps is None else frozenset(steps)
        self.keys = None if keys is None else frozenset(str(k) for k in keys)
        self.start_us = MIN_TIMESTAMP_MICROS if start_us is None else int(start_us)
        self.end_us = MAX_TIMESTAMP_MICROS if end_us is None else int(end_us)
        self.max_elements = max_elements

    @classmethod
    def from_options(cls, options: Any) -> Optional["RecordPanes"]:
        """The recording the pipeline options ask for (`RecordPanesOptions`), or None."""
        from headrace.options.pipeline_options import RecordPanesOptions
        ro = options.view_as(RecordPanesOptions)
        if not ro.record_panes:
            return None
        return cls(ro.record_panes, steps=ro.record_panes_steps, keys=ro.record_panes_keys,
                   start_us=_seconds_to_us(ro.record_panes_start), end_us=_seconds_to_us(ro.record_panes_end),
                   max_elements=ro.record_panes_max_elements)

    def records(self, label: str) -> bool:
        """Whether the grouping step `label` is recorded."""
        return self.steps is None or label in self.steps

    def recorder(self, label: str, writer: Optional[str] = None) -> "PaneRecorder":
        """A new writer of the step `label`'s recording; `writer` names it (see `PaneRecorder`)."""
        return PaneRecorder(self, label, writer)


def recorded_step(recording: Optional[RecordPanes], label: str) -> Optional[RecordPanes]:
    """`recording` when it records the grouping step `label`, else None (also when there is no
    recording)."""
    return recording if recording is not None and recording.records(label) else None


def _seconds_to_us(seconds: Optional[float]) -> Optional[int]:
    return None if seconds is None else int(round(float(seconds) * 1_000_000))


def safe_name(text: str, limit: int = 80, empty: str = "step") -> str:
    """`text` made safe as a file name: runs of other characters than letters, digits, `.`,
    `_` and `-` become `_`, cut to `limit` characters (`empty` if nothing is left)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")[:limit] or empty


def step_directory(directory: str, label: str) -> str:
    """Where the recording of step `label` is written under `directory`: the label made safe
    as a file name, and a short hash of it (two labels never share a directory)."""
    digest = hashlib.sha1(label.encode("utf-8")).hexdigest()[:8]
    return os.path.join(directory, f"{safe_name(label)}-{digest}")


def _bounds(window: Any) -> Tuple[int, int]:
    start = getattr(window, "start", None)
    end = getattr(window, "end", None)
    if start is None or end is None:  # the global window
        return MIN_TIMESTAMP_MICROS, MAX_TIMESTAMP_MICROS
    return start.micros, end.micros


def _value(value: Any) -> Tuple[str, Optional[float]]:
    """A value as a short text (a broken `__repr__` does not fail the pipeline) and, when it is
    a number, as a float."""
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    return _short_repr(value, _VALUE_CHARS), number


class PaneRecorder:
    """One writer of a step's recording (see the module doc); `close` writes what it holds.

    `writer` names the writer's files. A Spark task names it after what it computes (its
    partition; in streaming, also the micro-batch), so an attempt computed again (a retried
    task, a replayed micro-batch, a partition Spark recomputes) writes the same rows to the
    same files, replacing them: the recording holds each once. Without a name, a fresh one."""

    def __init__(self, spec: RecordPanes, label: str, writer: Optional[str] = None) -> None:
        self.spec = spec
        self.label = label
        self.writer = writer if writer is not None else uuid.uuid4().hex[:12]
        self.seq = 0
        self.rows: Dict[str, List[Any]] = {c: [] for c in COLUMNS}
        self.elements = 0
        self.last_watermark: Optional[int] = None
        self.last_output_watermark: Optional[int] = None

    # ---- what the core saw and did --------------------------------------------------------

    def _keeps_key(self, key: Any) -> bool:
        return self.spec.keys is None or str(key) in self.spec.keys

    def _in_range(self, start: int, end: int) -> bool:
        return start < self.spec.end_us and end > self.spec.start_us

    def _add(self, kind: str, now: int, **fields: Any) -> None:
        rows = self.rows
        for c in COLUMNS[6:]:
            rows[c].append(fields.get(c))
        rows["step"].append(self.label)
        rows["writer"].append(self.writer)
        rows["seq"].append(self.seq)
        rows["kind"].append(kind)
        rows["processing_time_us"].append(now)
        rows["key"].append(fields.get("key"))
        self.seq += 1
        if len(rows["seq"]) >= _ROWS_PER_FILE:
            self.flush()

    def element_rows(self, key: Any, elements: Iterable[Element], now: int) -> None:
        """Records a key's input elements, which arrived at processing time `now`."""
        if not self._keeps_key(key):
            return
        cap = self.spec.max_elements
        k = str(key)
        for e in elements:
            if cap is not None and self.elements >= cap:
                return
            if self._add_element("element", k, e, now):
                self.elements += 1

    def _add_element(self, kind: str, key: str, e: Element, now: int, reason: Optional[str] = None
                     ) -> bool:
        """Records an input element as a row of `kind` if its event time is in the range kept;
        whether it did."""
        if not self.spec.start_us <= e.timestamp_us < self.spec.end_us:
            return False
        start, end = _bounds(e.window)
        text, number = _value(e.value)
        self._add(kind, now, key=key, event_time_us=e.timestamp_us, window_start_us=start,
                  window_end_us=end, value=text, value_number=number, retraction=e.is_retraction,
                  reason=reason)
        return True

    def watermark(self, watermark: int, now: int) -> None:
        """Records the input watermark the core was told, when it changed."""
        if watermark != self.last_watermark:
            self.last_watermark = watermark
            self._add("watermark", now, watermark_us=watermark)

    def output_watermark(self, watermark: int, now: int) -> None:
        """Records the step's output watermark (its runner's), when it changed."""
        if watermark != self.last_output_watermark:
            self.last_output_watermark = watermark
            self._add("output_watermark", now, watermark_us=watermark)

    def panes(self, key: Any, panes: Iterable[Pane], now: int) -> None:
        """Records the panes the core fired for a key at processing time `now`."""
        if not self._keeps_key(key):
            return
        k = str(key)
        for p in panes:
            start, end = _bounds(p.window)
            if not self._in_range(start, end):
                continue
            info = p.pane_info
            text, number = _value(p.value)
            self._add("pane", now, key=k, event_time_us=p.timestamp_us, window_start_us=start,
                      window_end_us=end, value=text, value_number=number, timing=info.timing.name,
                      pane_index=info.index, nonspeculative_index=info.nonspeculative_index,
                      is_first=info.is_first, is_last=info.is_last, retraction=p.is_retraction)

    def dropped(self, key: Any, elements: Iterable[Element], now: int, reason: str) -> None:
        """Records the elements the core dropped (`reason`: "late" or "closed")."""
        if not self._keeps_key(key):
            return
        k = str(key)
        for e in elements:
            self._add_element("dropped", k, e, now, reason)

    # ---- writing ----------------------------------------------------------------------------

    def flush(self) -> None:
        """Writes the rows held so far to a new Parquet file of the step's directory."""
        if not self.rows["seq"]:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq
        table = pa.table({c: pa.array(self.rows[c], _TYPES[c]) for c in COLUMNS})
        d = step_directory(self.spec.directory, self.label)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, f"part-{self.writer}-{self.seq:012d}.parquet")
        temp = f"{path}.{uuid.uuid4().hex[:8]}.tmp"   # (two attempts may write at once)
        pq.write_table(table, temp)
        os.replace(temp, path)   # a reader never sees a half-written file
        self.rows = {c: [] for c in COLUMNS}

    close = flush


def _arrow_types() -> Dict[str, str]:
    ints = ("seq", "processing_time_us", "event_time_us", "window_start_us", "window_end_us",
            "watermark_us", "pane_index", "nonspeculative_index")
    types = {c: "int64" for c in ints}
    types.update(value_number="float64", is_first="bool", is_last="bool", retraction="bool")
    return {c: types.get(c, "string") for c in COLUMNS}


_TYPES = _arrow_types()


def read_panes(directory: str, step: Optional[str] = None) -> Any:
    """The recording under `directory` (of step `step` only, when given) as one pyarrow Table,
    each writer's rows in their order; raises InvalidArgumentError naming the steps recorded
    when `step` is not one of them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    if not os.path.isdir(directory):
        raise InvalidArgumentError(f"no pane recording at {directory!r}: run the pipeline with "
                                   f"--record_panes={directory} first")
    dirs = sorted(os.path.join(directory, d) for d in os.listdir(directory)
                  if os.path.isdir(os.path.join(directory, d)))
    if step is not None:
        wanted = step_directory(directory, step)
        if wanted not in dirs:
            raise InvalidArgumentError(
                f"step {step!r} is not in the recording at {directory!r}; recorded steps: "
                f"{', '.join(recorded_steps(directory)) or 'none'}")
        dirs = [wanted]
    tables = [pq.read_table(os.path.join(d, f)) for d in dirs for f in sorted(os.listdir(d))
              if f.endswith(".parquet")]
    if not tables:
        return pa.table({c: pa.array([], _TYPES[c]) for c in COLUMNS})
    table = pa.concat_tables(tables)
    return table.sort_by([("processing_time_us", "ascending"), ("writer", "ascending"),
                          ("seq", "ascending")])


def recorded_steps(directory: str) -> List[str]:
    """The labels of the steps recorded under `directory`."""
    import pyarrow.parquet as pq
    labels = []
    for d in sorted(os.listdir(directory)):
        path = os.path.join(directory, d)
        files = sorted(f for f in os.listdir(path) if f.endswith(".parquet")) if os.path.isdir(path) else []
        if files:
            labels.append(pq.read_table(os.path.join(path, files[0]), columns=["step"])["step"][0].as_py())
    return labels
