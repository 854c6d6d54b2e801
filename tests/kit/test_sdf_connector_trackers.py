"""Every connector's splittable DoFn and restriction tracker, driven as a runner drives them.

The property of tests/kit/test_sdf_trackers.py, for the connectors: however the runner splits a
connector's restrictions while they are read, and whatever the connector checkpoints, the
records read by the primary and every residual (residuals of residuals too), each processed to
completion, are every record of the input exactly once, in order within each part.

Each test builds the connector's step from its public transform (the splittable ParDo node of
a pipeline, or a `Read` as the local runner reads it: `kit.sdf.read_spec` / `read_works`) and
runs it as a runner does (`kit.sdf.SplittableStep.run_bundle`, one work per bundle), with a
`SplitPolicy` whose checkpoints (before a claim) and splits at a fraction of the remainder
(after a claim) hypothesis draws; before processing a work the runner may also cut it into parts
(`split_work`, as the Spark batch runner re-spreads a straggler's rest), and it processes the
pending works in a drawn order. A processing-time clock moves forward with each bundle (a
self-checkpoint's rest waits for its resume time). Along the way no output is earlier than the
watermark hold of the work it came from.

Covered: `ReadAllFromText` (byte ranges of line starts; plain lines claimed a buffer at a time,
the buffer shrunk so that small files span many; custom delimiters and escapes one record at a
time; compressed files whole), `ReadAllFromParquet` (row groups), `Watch` (its growth state,
polls returning new and repeated outputs), `PeriodicSequence` (`ImpulseSeqGenDoFn`'s offset
range over timestamps, with and without a stop), and `Read` of a BoundedSource
(`BoundedSourceReader`, `_SourcePartTracker`) and of an UnboundedSource
(`UnboundedSourceReader`, `_PositionTracker`).
"""

from __future__ import annotations

import gzip
import os
import tempfile
from typing import Any, Callable, Iterator, List, Optional, Tuple
from unittest import mock

import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import example, given, settings, strategies as st

import headrace as beam
import headrace.io.textio as textio
from headrace.io.iobase import (
    BoundedSource, BoundedSourceReader, Read, UnboundedSource, UnboundedSourceReader,
)
from headrace.io.parquetio import ReadAllFromParquet, ReadFromParquet
from headrace.io.periodicsequence import PeriodicSequence
from headrace.io.restriction_trackers import OffsetRange
from headrace.io.textio import ReadAllFromText
from headrace.io.watch import PollFn, PollResult, Watch, after_time_since_new_output, never
from headrace.metrics.metric import MetricsContainer
from headrace.model.time import MAX_TIMESTAMP_MICROS, Timestamp, set_processing_time
from headrace.model.windowed import TimestampedValue, WindowedValue
from headrace.runners.kit.sdf import (
    SplitPolicy, SplittableSpec, SplittableStep, Work, read_spec, read_works,
)
from headrace.runners.kit.sources import to_windowed_value
from tests.conformance.test_textio_beam_options import reference_records
from tests.kit.test_sdf_trackers import FRACTIONS

# deterministic: the same examples every run, none replayed from a database
SETTINGS = dict(deadline=None, derandomize=True, database=None)
START_US = 1_700_000_000_000_000   # the processing-time clock starts here
# FRACTIONS draws 0 (a checkpoint) and extremes often; add fractions spread over the remainder
SPLIT_FRACTIONS = st.one_of(FRACTIONS, st.integers(1, 98).map(lambda k: k / 100))


class _Replay:
    """`st.data()` in an explicit @example: the draws of a failing example, in order, then 0
    (falsy: no checkpoint, no split, no cut; the first work; no time passes)."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        """The next recorded draw."""
        return self.values.pop(0) if self.values else 0

    def __repr__(self) -> str:
        return f"_Replay{tuple(self.values)}"


class _DrawnSplits(SplitPolicy):
    """The runner's splits, drawn: before a claim a checkpoint, after a claim a split at a
    fraction of the remainder (0: a checkpoint), at most `budget` draws (then none)."""

    def __init__(self, data: Any, budget: int) -> None:
        super().__init__()
        self.data = data
        self.budget = budget

    def draw(self, strategy: Any, default: Any) -> Any:
        """A drawn value while the budget lasts, else `default`."""
        if self.budget <= 0:
            return default
        self.budget -= 1
        return self.data.draw(strategy)

    def checkpoint_now(self, claims: int, started: float, tracker: Any = None) -> bool:
        return bool(self.draw(st.sampled_from([False, False, False, True]), False))

    def test_split(self) -> Optional[float]:
        if self.draw(st.booleans(), False):
            return float(self.data.draw(SPLIT_FRACTIONS))
        return None


class _Part:
    """One processed work: its restriction, the values it output, and when it ran."""

    def __init__(self, work: Work, outputs: List[WindowedValue], now_us: int) -> None:
        self.work = work
        self.restriction = work.restriction
        self.outputs = outputs
        self.values = [wv.value for wv in outputs]
        self.now_us = now_us


def _splittable_step(transform: Any) -> SplittableStep:
    """The step of the splittable ParDo that `transform` (applied to a Create) expands to."""
    p = beam.Pipeline(runner="LocalRunner")
    _ = p | beam.Create([""]) | transform
    node = next(n for n in p.primitives()
                if getattr(n.transform, "is_splittable", False))
    return SplittableStep(SplittableSpec.of(node))


def _initial_works(step: SplittableStep, value: Any) -> List[Work]:
    """The works of one input element, made at the clock's start (a watch's termination state
    starts from the processing time)."""
    before = set_processing_time(START_US)
    try:
        return step.initial_works([to_windowed_value(value)])
    finally:
        set_processing_time(before)


def _read_step(source: Any, reader: Any, parallelism: int) -> Tuple[SplittableStep, List[Work]]:
    """The step and initial works of `Read(source)` read by `reader`, as the local runner reads."""
    p = beam.Pipeline(runner="LocalRunner")
    _ = p | Read(source)
    node = next(n for n in p.primitives() if isinstance(n.transform, Read))
    step = SplittableStep(read_spec(node, reader))
    return step, read_works(node.full_label, source, parallelism, step)


def _drive(step: SplittableStep, works: List[Work], data: Any, budget: int,
           advance: Optional[Callable[[Work], int]] = None,
           stop_us: Optional[int] = None, max_bundles: int = 400) -> List[_Part]:
    """Processes `works` and every residual to completion, one work per bundle, in a drawn
    order; the runner may first cut a work into parts (`split_work`). The clock moves to a
    work's resume time and on by `advance(work)` (0 by default); with `stop_us`, works due later
    are left. Returns the parts in processing order."""
    policy = _DrawnSplits(data, budget)
    pending = list(works)
    parts: List[_Part] = []
    now = START_US
    while pending:
        due = [w for w in pending if stop_us is None or w.resume_at_us <= stop_us]
        if not due:
            break
        work = due[policy.draw(st.integers(0, len(due) - 1), 0) if len(due) > 1 else 0]
        pending.remove(work)
        cut = policy.draw(st.sampled_from([1] * 6 + [2, 3]), 1)
        if cut > 1:
            pieces = step.split_work(work, cut)
            assert pieces, "split_work gave no work back"
            work, rest = pieces[0], pieces[1:]
            pending.extend(rest)
        now = max(now, work.resume_at_us) + (advance(work) if advance else 0)
        if stop_us is not None:
            now = min(now, max(stop_us, work.resume_at_us))
        result = step.run_bundle([work], now, policy, 1, MetricsContainer(), MetricsContainer())
        outputs = [wv for out in result.outputs.values() for wv in out]
        # the work's watermark hold: nothing it outputs is earlier
        assert all(wv.timestamp_us >= work.hold_us for wv in outputs), (work, outputs)
        parts.append(_Part(work, outputs, now))
        pending.extend(result.residuals)
        assert len(parts) < max_bundles, "the reads do not end"
    step.teardown()
    return parts


def _in_offset_order(parts: List[_Part]) -> List[Any]:
    """The values of parts over OffsetRanges, the parts in the order of their ranges."""
    ordered = sorted(parts, key=lambda q: (q.restriction.start, q.restriction.stop))
    return [v for q in ordered for v in q.values]


# ---- ReadAllFromText ---------------------------------------------------------------------------

def _check_read_all_from_text(raw: bytes, compressed: bool, chunk: int, bundle: int, data: Any,
                              **options: Any) -> None:
    """ReadAllFromText of a file of `raw` bytes (gzipped if `compressed`), its read buffer
    `chunk` bytes and its initial ranges `bundle` bytes, read however split, gives the records
    of the reference definition and of ReadFromText, each once, in order by range."""
    with tempfile.TemporaryDirectory() as tmp, mock.patch.object(textio, "_CHUNK", chunk):
        path = os.path.join(tmp, "f.txt.gz" if compressed else "f.txt")
        with (gzip.open if compressed else open)(path, "wb") as fh:
            fh.write(raw)
        step = _splittable_step(ReadAllFromText(desired_bundle_size=bundle, **options))
        works = _initial_works(step, path)
        parts = _drive(step, works, data, budget=data.draw(st.integers(0, 150)))
        got = _in_offset_order(parts)
        expected = reference_records(raw, options.get("delimiter"), options.get("escapechar"),
                                     options["strip_trailing_newlines"],
                                     options["skip_header_lines"])
        assert got == [r.decode("utf-8") for r in expected]
        source = beam.ReadFromText(path, **options)._source
        assert got == [x for part in source.split(3) for x in source.read(part)]
        if compressed:   # read whole: the one position
            assert all(q.restriction == OffsetRange(0, 1) for q in parts if q.values)


@settings(max_examples=150, **SETTINGS)
@given(lines=st.lists(st.text(alphabet="ab \ré", max_size=9), max_size=30),
       newline=st.sampled_from(["\n", "\r\n"]), final_newline=st.booleans(), strip=st.booleans(),
       skip=st.sampled_from([0, 0, 1, 2]), chunk=st.integers(1, 16), bundle=st.integers(1, 200),
       data=st.data())
def test_read_all_from_text_reads_every_line_once_however_split(
        lines, newline, final_newline, strip, skip, chunk, bundle, data):
    # plain lines: claimed a buffer at a time (buffers of `chunk` bytes: many per file)
    raw = (newline.join(lines) + (newline if final_newline and lines else "")).encode("utf-8")
    _check_read_all_from_text(raw, False, chunk, bundle, data, strip_trailing_newlines=strip,
                              skip_header_lines=skip)


PIECES = st.sampled_from([b"a", b"bc", b"\n", b"\r\n", b"\n\n", b"\r", b"|", b"#|", b"\\",
                          b"\xc3\xa9", b"xyz "])


@settings(max_examples=120, **SETTINGS)
@given(pieces=st.lists(PIECES, max_size=40), delimiter=st.sampled_from([None, b"|", b"#|"]),
       escape=st.sampled_from([None, b"\\"]), strip=st.booleans(), skip=st.integers(0, 2),
       compressed=st.sampled_from([False, False, True]), chunk=st.integers(1, 24),
       bundle=st.integers(1, 60), data=st.data())
def test_read_all_from_text_reads_every_record_once_however_split(
        pieces, delimiter, escape, strip, skip, compressed, chunk, bundle, data):
    # records with a custom delimiter or escapes (claimed one by one), compressed files whole
    _check_read_all_from_text(b"".join(pieces), compressed, chunk, bundle, data,
                              delimiter=delimiter, escapechar=escape,
                              strip_trailing_newlines=strip, skip_header_lines=skip)


# ---- ReadAllFromParquet ------------------------------------------------------------------------

@settings(max_examples=80, **SETTINGS)
@given(rows=st.lists(st.integers(-5, 5), max_size=30), group=st.integers(1, 6),
       desired=st.sampled_from([1, 100, 400, 1 << 30]), with_filename=st.booleans(),
       data=st.data())
def test_read_all_from_parquet_reads_every_row_once_however_split(rows, group, desired,
                                                                  with_filename, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "f.parquet")
        table = pa.table({"i": list(range(len(rows))), "v": rows})
        pq.write_table(table, path, row_group_size=group)
        step = _splittable_step(ReadAllFromParquet(desired_bundle_size=desired,
                                                   with_filename=with_filename))
        works = _initial_works(step, path)
        parts = _drive(step, works, data, budget=data.draw(st.integers(0, 60)))
        got = _in_offset_order(parts)
        expected = table.to_pylist()
        assert got == ([(path, r) for r in expected] if with_filename else expected)
        source = ReadFromParquet(path)._source
        assert table.to_pylist() == [r for part in source.split(2) for r in source.read(part)]


# ---- Watch -------------------------------------------------------------------------------------

class _ScriptedPolls(PollFn):
    """Poll k returns polls[k] (more to come), the last one complete; later polls repeat it."""

    def __init__(self, polls: List[List[int]], complete: bool) -> None:
        self.polls = polls
        self.complete = complete
        self.calls = 0

    def __call__(self, element: Any) -> PollResult:
        k = min(self.calls, len(self.polls) - 1)
        self.calls += 1
        last = k == len(self.polls) - 1
        if last and self.complete:
            return PollResult.complete(self.polls[k])
        return PollResult.incomplete(self.polls[k])


@settings(max_examples=100, **SETTINGS)
@given(polls=st.lists(st.lists(st.integers(0, 12), max_size=6), min_size=1, max_size=8),
       complete=st.booleans(), data=st.data())
# the runner cut the first work before its poll: the ended primary polled, and lost the result
@example(polls=[[0], []], complete=True, data=_Replay(1, 2))
def test_watch_emits_every_distinct_output_once_however_split(polls, complete, data):
    interval_us = 1_000_000
    # without a complete poll, the watch ends once a poll found nothing new for 3 intervals
    termination = never() if complete else after_time_since_new_output(3.0)
    watch = Watch(_ScriptedPolls(polls, complete), poll_interval=1.0, termination=termination)
    step = _splittable_step(watch)
    poll_fn = step.processor().pardo.dofn.poll_fn   # the worker's copy, which counts its polls
    works = _initial_works(step, "in")
    parts = _drive(step, works, data, budget=data.draw(st.integers(0, 60)),
                   advance=lambda w: data.draw(st.integers(0, interval_us)) if w.resume_at_us > START_US
                   else 0)
    got = [v for q in parts for v in q.values]
    answered = [polls[min(k, len(polls) - 1)] for k in range(poll_fn.calls)]
    assert got == [("in", x) for x in dict.fromkeys(x for poll in answered for x in poll)]
    if complete:   # polled until the complete poll
        assert poll_fn.calls >= len(polls)
    for q in parts:   # plain values are stamped with the processing time of their poll
        assert all(wv.timestamp_us == q.now_us for wv in q.outputs)


# ---- PeriodicSequence --------------------------------------------------------------------------

@settings(max_examples=100, **SETTINGS)
@given(offset_s=st.integers(-5, 5), interval_ms=st.integers(1, 1500), count=st.integers(0, 25),
       bounded=st.booleans(), data=st.data())
# the runner cut an endless sequence's first work in two: the residual started past the end of
# time, and its first timestamp raised
@example(offset_s=0, interval_ms=1, count=0, bounded=False, data=_Replay(1, 2))
def test_periodic_sequence_emits_every_timestamp_once_however_split(offset_s, interval_ms, count,
                                                                   bounded, data):
    interval_us = interval_ms * 1000
    start_us = START_US + offset_s * 1_000_000
    horizon = start_us + count * interval_us   # the clock's end in the endless case
    stop_us = horizon if bounded else MAX_TIMESTAMP_MICROS
    step = _splittable_step(PeriodicSequence())
    works = _initial_works(step, (start_us, stop_us, interval_us))
    parts = _drive(step, works, data, budget=data.draw(st.integers(0, 60)),
                   advance=lambda w: data.draw(st.integers(0, 3 * interval_us)),
                   stop_us=None if bounded else horizon)
    got = _in_offset_order(parts)
    last = count if bounded else count + 1   # the endless one also emits the horizon itself
    assert got == [(start_us + i * interval_us) / 1e6 for i in range(last)]
    for q in parts:
        for wv in q.outputs:   # at its own time, once processing time has reached it
            assert wv.timestamp_us == round(wv.value * 1e6) <= q.now_us


# ---- Read of a BoundedSource and of an UnboundedSource -----------------------------------------

class _Batches(BoundedSource):
    """Parts of records (lists of batches: `read_batches` gives them as they are)."""

    def __init__(self, parts: List[List[List[int]]]) -> None:
        self.parts = parts

    def split(self, desired_parallelism: int) -> List[int]:
        return list(range(len(self.parts)))

    def read(self, part: int) -> Iterator[int]:
        for batch in self.parts[part]:
            yield from batch

    def read_batches(self, part: int, size: int) -> Iterator[List[int]]:
        yield from self.parts[part]


@settings(max_examples=100, **SETTINGS)
@given(parts=st.lists(st.lists(st.lists(st.integers(0, 99), min_size=1, max_size=4), max_size=4),
                      max_size=5),
       parallelism=st.integers(1, 4), data=st.data())
def test_bounded_read_reads_every_part_once_however_split(parts, parallelism, data):
    source = _Batches(parts)
    step, works = _read_step(source, BoundedSourceReader(parallelism), parallelism)
    done = _drive(step, works, data, budget=data.draw(st.integers(0, 60)))
    by_part = {}
    for q in done:
        if q.values:
            assert q.restriction.part not in by_part, "a part was read twice"
            by_part[q.restriction.part] = q.values
    assert by_part == {i: list(source.read(i)) for i, p in enumerate(parts) if any(p)}


class _Growing(UnboundedSource):
    """Records 0, 1, ... (record i at event time i seconds); each look (`available`) makes
    `growth[k]` more readable, then all `total` once the growth is spent; position: the index
    of the next record."""

    def __init__(self, total: int, growth: List[int]) -> None:
        self.total = total
        self.growth = growth
        self.looks = 0
        self.readable = 0

    def initial_position(self) -> int:
        return 0

    def available(self, position: int, now_us: int, max_records: int) -> int:
        k, self.looks = self.looks, self.looks + 1
        self.readable = min(self.total, self.readable + self.growth[k]) if k < len(self.growth) \
            else self.total
        return max(position, min(self.readable, position + max_records))

    def read(self, start: int, end: int) -> Iterator[TimestampedValue]:
        for i in range(start, end):
            yield TimestampedValue(i, Timestamp.of(i))

    def watermark(self, position: int) -> Timestamp:
        if position >= self.total:
            return Timestamp(micros=MAX_TIMESTAMP_MICROS)
        return Timestamp.of(position)


@settings(max_examples=100, **SETTINGS)
@given(total=st.integers(0, 30), growth=st.lists(st.integers(0, 5), max_size=12),
       max_records=st.integers(1, 8), data=st.data())
def test_unbounded_read_reads_every_record_once_however_split(total, growth, max_records, data):
    source = _Growing(total, growth)
    step, works = _read_step(source, UnboundedSourceReader(max_records, poll_seconds=0.5), 1)
    parts = _drive(step, works, data, budget=data.draw(st.integers(0, 60)), max_bundles=600)
    # one live work at a time: the reads follow each other
    assert [v for q in parts for v in q.values] == list(range(total))
    for q in parts:
        assert all(wv.timestamp_us == Timestamp.of(wv.value).micros for wv in q.outputs)
