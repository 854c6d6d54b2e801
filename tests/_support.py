"""Helpers for tests whose DoFns must record or decide things across bundle attempts.

DoFns are serialised and may run in other processes (Spark executors), so their shared
state lives in files rather than in module globals: a `Journal` is an append-only event log,
a `Once` hands out "first time?" flags. Both are small picklable objects holding a path.
`Panes` records the pane of each output of a grouping. `IndexedRecords` and `ArrowRows` are
unbounded sources of records made from their index.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Dict, Iterator, List

import headrace as beam
from headrace.io.flushes import FlushWriter
from headrace.io.iobase import ArrowBatchSource, UnboundedSource


class Journal:
    """An append-only log of JSON events in a file (safe across processes and pickling)."""

    def __init__(self, path: Any) -> None:
        self.path = os.fspath(path)

    def write(self, *fields: Any) -> None:
        line = json.dumps(list(fields)) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)

    def read(self) -> List[list]:
        if not os.path.exists(self.path):
            return []
        with open(self.path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]


class Once:
    """`first(name)` is True exactly once per name (a marker file created with O_EXCL)."""

    def __init__(self, directory: Any) -> None:
        self.directory = os.fspath(directory)
        os.makedirs(self.directory, exist_ok=True)

    def first(self, name: str) -> bool:
        try:
            fd = os.open(os.path.join(self.directory, name), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        os.close(fd)
        return True


def new_instance_id() -> str:
    """A fresh id for one DoFn instance (call it in setup, not __init__: __init__ runs once
    before serialisation, so every deserialised copy would share the id)."""
    return uuid.uuid4().hex


def counter_value(result: Any, name: str, attempted: bool = False) -> int:
    """The committed (or attempted) value of the user counter `name`, summed over steps."""
    from headrace.metrics.metric import MetricsFilter

    found = result.metrics().query(MetricsFilter().with_name(name))["counters"]
    return sum(r.attempted if attempted else r.committed for r in found)


class BundleSizes(beam.DoFn):
    """Passes elements through and journals the size of each bundle it saw."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal

    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.n += 1
        yield x

    def finish_bundle(self):
        self.journal.write(self.n)


class Panes(beam.DoFn):
    """(key, value (lists sorted), window start s[, window end s], timestamp us, timing, index,
    nonspeculative index) for each (key, value) output of a grouping."""

    def __init__(self, window_end: bool = False) -> None:
        self.window_end = window_end

    def process(self, kv, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam,
                pane=beam.DoFn.PaneInfoParam):
        k, v = kv
        v = tuple(sorted(v)) if isinstance(v, list) else v
        where = (float(w.start), float(w.end)) if self.window_end else (float(w.start),)
        yield (k, v, *where, ts.micros, pane.timing.name, pane.index, pane.nonspeculative_index)


def visible_files(directory: Any) -> Dict[str, List[str]]:
    """{file name: sorted lines} of the files in `directory` whose names do not start with '.'."""
    out = {}
    for name in sorted(os.listdir(directory)):
        if not name.startswith("."):
            with open(os.path.join(directory, name), encoding="utf-8") as fh:
                out[name] = sorted(fh.read().splitlines())
    return out


class IndexedRecords(UnboundedSource):
    """Records 0..n-1, all readable at once (a position is the next record's index); record i
    is `Row(**fields(i))` unless `read` says otherwise. Subclasses give `watermark`, and
    `fields` or `read`."""

    def __init__(self, n: int) -> None:
        self.n = n

    def fields(self, i: int) -> Dict[str, Any]:
        """Record i's fields, in order."""
        raise NotImplementedError

    def initial_position(self) -> int:
        return 0

    def available(self, position: int, now_us: int, max_records: int) -> int:
        return min(self.n, position + max_records)

    def read(self, start: int, end: int) -> Iterator[Any]:
        for i in range(start, end):
            yield beam.Row(**self.fields(i))


class ArrowRows(IndexedRecords, ArrowBatchSource):
    """IndexedRecords of Rows, also read as Arrow batches of `size` rows (an ArrowBatchSource,
    its part the range (start, end))."""

    row_attributes = True

    def read_arrow(self, part: Any, size: int) -> Iterator[Any]:
        import pyarrow as pa   # here: the DoFns of this module reach workers that need no pyarrow
        start, end = part
        for lo in range(start, end, size):
            yield pa.RecordBatch.from_pylist([self.fields(i) for i in range(lo, min(end, lo + size))])

    def records_of(self, batch: Any) -> List[Any]:
        return [beam.Row(**r) for r in batch.to_pylist()]


def property_settings(runner: str) -> Any:
    """Hypothesis settings for a property test on `runner`: 30 examples on the local runner,
    10 on a Spark master (each example is a Spark job; the local runner checks the model)."""
    from hypothesis import settings
    return settings(max_examples=30 if runner == "LocalRunner" else 10, deadline=None)


# ---- streaming jobs killed and restarted (tests/streaming/test_*restart.py) ----------------------

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def batches_done(ckpt: Any) -> int:
    """The number of the last batch whose driver state a streaming job wrote under its
    checkpoint `ckpt` (-1: none yet)."""
    batches = os.path.join(ckpt, "headrace", "batches")
    names = os.listdir(batches) if os.path.isdir(batches) else []
    return max([int(n.split(".")[0]) for n in names if n.endswith(".pkl")], default=-1)


def run_job(script: str, args: List[Any], ckpt: Any, kill_at_batch: Any = None) -> Any:
    """Runs the job `script args` in a subprocess; with `kill_at_batch`, SIGKILLs it from
    outside once it has written that batch (`batches_done`), at whatever point it then is.
    Returns (exit code, stderr)."""
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYTHONPATH=REPO)
    proc = subprocess.Popen([sys.executable, script, *map(str, args)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_at_batch is not None:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            if batches_done(ckpt) >= kill_at_batch:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, err



# ---- exactly-once sinks (headrace.io.flushes) ----------------------------------------------------


class FailAfterWrite(FlushWriter):
    """Wraps a sink's FlushWriter: the first attempt of each flush fails right AFTER the wrapped
    writer wrote it (a crash between the sink's commit and the state's), so the retry must find
    the flush's marker and write nothing more."""

    def __init__(self, inner: FlushWriter, once: Once, tag: str = "fail") -> None:
        self.inner, self.once, self.tag = inner, once, tag

    def setup(self) -> None:
        self.inner.setup()

    def teardown(self) -> None:
        self.inner.teardown()

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        written = self.inner.write(shard, flush, elements)
        if self.once.first(f"{self.tag}-{shard}-{flush}"):
            raise RuntimeError(f"injected: flush {flush} of shard {shard} failed after its "
                               f"write (written: {written})")
        return written
