"""Vectorised split reads (`stages._vector_read`): when an unbounded source reads Arrow batches
(`iobase.ArrowBatchSource`) and feeds plain element-wise steps and a lifted built-in combine,
the first level of the Spark streaming query evaluates them over whole columns, as the batch
runner's fast path does. Its output must be what the element-by-element path sends: the same
partial accumulators per key and window (with the inputs they hold) and the same inputs behind
a split lift's watermark, in the same bundles and order. These tests run the level's function
itself on a micro-batch's rows, with and without the Arrow capability, and compare.
(End to end, on every runner: tests/conformance/test_unbounded_sources.py.)"""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

import headrace as beam
from headrace.io import iobase
from headrace.io.iobase import Read
from headrace.options.pipeline_options import PipelineOptions
from headrace.runners.spark.worker.env import WorkerEnv
from headrace.runners.spark.worker.failures import TaskFailure
from headrace.runners.spark.streaming import rows, stages
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.streaming.plan import build_plan
from headrace.transforms import trigger, window
from tests._support import ArrowRows, IndexedRecords

KEYS = (b"\x00\x00\x00\x01", b"\x00\x00\x00\x02")


def _record(i):
    """Record i: key k0..k6, value, event time (ms) mostly rising with some earlier ones."""
    ts_ms = 1000 * i - (90_000 if i % 11 == 0 else 0) + 7 * (i % 3)
    return ("k%d" % (i % 7), i % 13 - 4, ts_ms)


class RowStream(IndexedRecords):
    """Records 0..n-1 as Row(key, value, ts_ms), read one by one."""

    def __init__(self, n):
        super().__init__(n)
        self.records_of_calls = 0

    def fields(self, i):
        k, v, t = _record(i)
        return {"key": k, "value": v, "ts_ms": t}

    def split_positions(self, start, end, n):
        return [start + (end - start) // 2] if end - start > 1 and n > 1 else []

    def watermark(self, position):
        return beam.utils.timestamp.Timestamp(micros=1000 * (1000 * position - 100_000))


class ArrowRowStream(RowStream, ArrowRows):
    """The same records, also read as Arrow batches (in batches of `size`)."""

    def records_of(self, batch):
        self.records_of_calls += 1
        return super().records_of(batch)


SESSIONS = dict(windowfn=window.Sessions(60),
                trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(60),
                                               late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.ACCUMULATING, allowed_lateness=600)
FIXED = dict(windowfn=window.FixedWindows(30))


def _level0(source, windowing, to_event=None):
    p = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    to_event = to_event or (lambda r: beam.window.TimestampedValue((r.key, r.value), r.ts_ms / 1000))
    (p | Read(source)
       | beam.Map(to_event)
       | beam.WindowInto(**windowing)
       | beam.CombinePerKey(sum)
       | beam.Map(lambda kv: kv))
    plan = build_plan(p, 10, 3, 2, KEYS, 1000)
    assert plan.split_reads == 2
    return plan.levels[0]


def _run_level(spec, tmp_path, start, end, w_prev_ms):
    """The level's output for one micro-batch reading positions start..end in one range, with
    the grouping's input watermark before the batch at w_prev_ms: {key: (cells by window,
    inputs behind)} merged over the KEYED rows."""
    ctl = Control(3, [1000 * w_prev_ms], [1000 * w_prev_ms + 1], [0], [0], 0, 0, {}, [0])
    batch = pa.RecordBatch.from_pydict(
        {"kind": [rows.CTL, rows.PASS], "pc": [rows.CTL_PC, rows.READ_PC], "key": [b"", b""],
         "bundle": [0, 1 << 20], "seq": [0, 0],
         "payload": [rows.dumps(ctl), rows.dumps((0, start, end))]},
        schema=stages._arrow_schema())
    env = WorkerEnv(spec.bundle_size, 3, str(tmp_path / "failures"))
    out = {}
    for b in stages.level_fn(spec, env)(iter([batch])):
        for kind, payload in zip(b.column("kind").to_pylist(), b.column("payload").to_pylist()):
            if kind != rows.KEYED:
                continue
            for kb, (key, cells, behind) in pickle.loads(payload).items():
                mine = out.setdefault(key, ({}, []))
                for w, acc, ts, n in cells:
                    cell = mine[0].setdefault(w, [0, None, 0])
                    cell[0] += acc
                    cell[1] = ts if cell[1] is None else min(cell[1], ts)
                    cell[2] += n
                mine[1].extend((bundle, seq, wv.value, wv.timestamp_us, wv.windows)
                               for bundle, seq, wv in behind)
    # sessions: partial sessions may be cut differently; compare what they hold per key
    return {k: (sorted((w.start.micros, w.end.micros, *c) for w, c in cells.items()), sorted(behind))
            for k, (cells, behind) in out.items()}


def _totals(result):
    """Per key: the sum of the partials, the inputs they hold, and the inputs behind the
    watermark."""
    return {k: (sum(c[2] for c in cells), sum(c[4] for c in cells), behind)
            for k, (cells, behind) in result.items()}


@pytest.mark.parametrize("windowing", [SESSIONS, FIXED], ids=["sessions-split-lift", "fixed-lift-all"])
@pytest.mark.parametrize("w_prev_ms", [-10**9, 150_000, 10**9],
                         ids=["none-behind", "some-behind", "all-behind"])
def test_a_vectorised_read_sends_what_the_element_path_sends(tmp_path, windowing, w_prev_ms):
    arrow, plain = ArrowRowStream(400), RowStream(400)
    spec_a, spec_p = _level0(arrow, windowing), _level0(plain, windowing)
    assert stages._vector_read(spec_a, 0) is not None
    assert stages._vector_read(spec_p, 0) is None
    got = _run_level(spec_a, tmp_path, 0, 400, w_prev_ms)
    want = _run_level(spec_p, tmp_path, 0, 400, w_prev_ms)
    assert _totals(got) == _totals(want)
    if windowing is FIXED:
        assert got == want   # one partial per key and window on both paths
    assert sum(n + len(b) for _, n, b in _totals(want).values()) == 400


def test_inputs_behind_the_watermark_keep_their_bundles_and_order(tmp_path):
    # w_prev at 150 s: records 0..149 (and the early ones of every 11th) are behind it and go
    # element by element, in the bundles (of 10) the element path gives them
    arrow = ArrowRowStream(400)
    got = _run_level(_level0(arrow, SESSIONS), tmp_path, 0, 400, 150_000)
    behind = [b for _, (_, b) in sorted(got.items())]
    assert all(lst == sorted(lst) for lst in behind)
    bundles = {bundle for lst in behind for bundle, *_ in lst}
    assert bundles and all(b - (1 << 20) < 40 for b in bundles)


def test_only_batches_with_inputs_behind_go_element_by_element(tmp_path, monkeypatch):
    monkeypatch.setattr(iobase, "ARROW_BLOCK_ROWS", 100)   # 4 batches of 100 records
    arrow = ArrowRowStream(400)
    spec = _level0(arrow, SESSIONS)
    _run_level(spec, tmp_path, 0, 400, -10**9)
    assert spec.reads[0][1].records_of_calls == 0
    _run_level(spec, tmp_path, 0, 400, 150_000)   # records 0..149 and a few later ones behind
    assert spec.reads[0][1].records_of_calls == 3


def test_a_step_the_fast_path_cannot_compile_keeps_the_element_path(tmp_path):
    table = {}   # a function reading a dict it closes over: not a column expression
    spec = _level0(ArrowRowStream(50), FIXED,
                   lambda r: beam.window.TimestampedValue((table.get(r.key, r.key), r.value), r.ts_ms / 1000))
    assert stages._vector_read(spec, 0) is None
    assert _totals(_run_level(spec, tmp_path, 0, 50, -10**9)) == _totals(
        _run_level(_level0(RowStream(50), FIXED), tmp_path, 0, 50, -10**9))


class BrokenArrowStream(ArrowRowStream):
    def read_arrow(self, part, size):
        yield from super().read_arrow((part[0], part[0] + 5), size)
        raise OSError("the stream's files are gone")


def test_a_failing_arrow_read_names_the_step_and_the_positions(tmp_path):
    p = beam.Pipeline(options=PipelineOptions(["--streaming"]))
    (p | "ReadRows" >> Read(BrokenArrowStream(50))
       | beam.Map(lambda r: beam.window.TimestampedValue((r.key, r.value), r.ts_ms / 1000))
       | beam.WindowInto(window.FixedWindows(30))
       | beam.CombinePerKey(sum))
    spec = build_plan(p, 10, 3, 2, KEYS, 1000).levels[0]
    with pytest.raises(TaskFailure) as info:   # the task's failure, carrying the step's error
        _run_level(spec, tmp_path, 0, 50, -10**9)
    assert "step 'ReadRows' failed reading 'positions 0 to 50'" in str(info.value)
    assert "the stream's files are gone" in str(info.value)
