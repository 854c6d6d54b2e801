"""The map side of a lifted combine (`runners.kit.partial.PartialCombiner`) with Sessions.

Sessions take a sweep path (inputs kept per key, sorted by window start and merged in one pass);
every other merging WindowFn takes the general path (a dictionary of windows per key, merged with
the WindowFn's own merge). A Sessions subclass takes the general path, so it is the reference
here: both must give the same sessions per key, with the same accumulated inputs and kept
timestamps, whatever the order and batching of the inputs.
"""

from __future__ import annotations

import gc
import sys
import tracemalloc

import pytest
from hypothesis import given, settings, strategies as st

import headrace as beam
from headrace.model.combine import SumCombineFn
from headrace.model.window import FixedWindows, IntervalWindow, Sessions
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.runners.kit.partial import MAX_BYTES, PartialCombiner, deep_size


class _GeneralSessions(Sessions):
    """Sessions by the general merging path (the partial combiner sweeps only exact Sessions)."""


class _Collect(beam.CombineFn):
    """Accumulates the sorted inputs (so any merge order gives the same accumulator)."""

    def create_accumulator(self):
        return []

    def add_input(self, acc, v):
        acc.append(v)
        return acc

    def merge_accumulators(self, accs):
        out = []
        for a in accs:
            out.extend(a)
        return out

    def extract_output(self, acc):
        return sorted(acc)

    def compact(self, acc):
        return sorted(acc)


def _partials(windowfn, combiner, batches, latest):
    windowing = Windowing(windowfn, timestamp_combiner=(TimestampCombiner.OUTPUT_AT_LATEST if latest
                                                        else TimestampCombiner.OUTPUT_AT_EARLIEST))
    partial = PartialCombiner("Combine", combiner, windowing)
    for batch in batches:
        partial.add_all([((k, v), ts, windowfn._assign(None, ts, (None,) * copies))
                         for k, v, ts, copies in batch])
    out = list(partial.emit(lambda kb, k, a, ts, w: (k, w.start_us, w.end_us, ts, a)))
    return sorted(out, key=repr)


_event = st.tuples(st.sampled_from(["a", "b", 7, ("t", 1)]), st.integers(0, 9),
                   st.integers(-50, 400), st.sampled_from([1, 1, 1, 2]))


@settings(max_examples=300, deadline=None)
@given(batches=st.lists(st.lists(_event, max_size=40), max_size=6), gap=st.integers(1, 30),
       latest=st.booleans())
def test_sessions_sweep_gives_the_general_path_sessions(batches, gap, latest):
    swept = _partials(Sessions(gap / 1e6), _Collect(), batches, latest)
    general = _partials(_GeneralSessions(gap / 1e6), _Collect(), batches, latest)
    assert swept == general


def test_sessions_sweep_spans_sweeps_of_one_key():
    # More inputs per key than a sweep holds: sessions built by earlier sweeps merge with later
    # inputs (an input joining two sessions merges their accumulators).
    fn = beam.combiners.CountCombineFn()
    windowing = Windowing(Sessions(15 / 1e6))
    partial = PartialCombiner("Count", fn, windowing)
    # ts 0, 20, 40, ... (separate sessions), then 10, 30, 50, ... joining them all into one.
    evens = [(("k", 1), t, (IntervalWindow._of(t, t + 15),)) for t in range(0, 4000, 20)]
    odds = [(("k", 1), t, (IntervalWindow._of(t, t + 15),)) for t in range(10, 4000, 20)]
    for chunk in range(0, len(evens), 7):
        partial.add_all(evens[chunk:chunk + 7])
    for chunk in range(0, len(odds), 7):
        partial.add_all(odds[chunk:chunk + 7])
    out = list(partial.emit(lambda kb, k, a, ts, w: (k, w.start_us, w.end_us, ts, a)))
    assert out == [("k", 0, 4005, 0, 400)]


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_event, max_size=40), max_size=6), gap=st.integers(1, 30),
       latest=st.booleans())
def test_a_proto_session_column_gives_the_sessions_of_its_windows(batches, gap, latest):
    # WindowInto(Sessions) over elements in one window each hands a lifted combine a
    # columnar.ProtoSessions column, which it reads from the timestamps (add_proto_sessions):
    # the same sessions as the column's materialised windows give.
    from headrace.model.window import GLOBAL_WINDOWS_TUPLE
    from headrace.runners.kit.columnar import Columns, ProtoSessions, window_columns
    windowfn = Sessions(gap / 1e6)
    windowing = Windowing(windowfn, timestamp_combiner=(TimestampCombiner.OUTPUT_AT_LATEST if latest
                                                        else TimestampCombiner.OUTPUT_AT_EARLIEST))
    lazy = PartialCombiner("Combine", _Collect(), windowing)
    eager = PartialCombiner("Combine", _Collect(), windowing)
    for batch in batches:
        cols = Columns([(k, v) for k, v, _, _ in batch], [ts for _, _, ts, _ in batch],
                       [GLOBAL_WINDOWS_TUPLE] * len(batch), None, None)
        out = window_columns(windowfn, cols)
        assert type(out.windows) is ProtoSessions
        assert list(out.windows) == [windowfn._assign(None, ts, GLOBAL_WINDOWS_TUPLE) for ts in out.ts]
        lazy.add_proto_sessions(out.values, out.windows.ts, out.windows.gap_us)
        eager.add_all(zip(out.values, out.ts, list(out.windows)))
    emit = lambda kb, k, a, ts, w: (k, w.start_us, w.end_us, ts, a)  # noqa: E731
    assert sorted(lazy.emit(emit), key=repr) == sorted(eager.emit(emit), key=repr)


def test_a_proto_session_column_reads_as_a_list_of_window_tuples():
    import pickle

    from headrace.runners.kit.columnar import Columns, ProtoSessions, window_columns
    from headrace.model.window import GLOBAL_WINDOWS_TUPLE
    cols = Columns(["x", "y", "z"], [5, 10, 30], [GLOBAL_WINDOWS_TUPLE] * 3, None, None)
    out = window_columns(Sessions(3 / 1e6), cols)
    assert type(out.windows) is ProtoSessions and len(out.windows) == 3
    windows = [(IntervalWindow._of(t, t + 3),) for t in (5, 10, 30)]
    assert list(out.windows) == windows and out.windows[1] == windows[1]
    assert list(out.windows[1:]) == windows[1:] and list(pickle.loads(pickle.dumps(out.windows))) == windows
    assert [wv.windows for wv in out.elements()] == windows
    # an element in two windows keeps its two copies of the window: no lazy column then
    two = Columns(["x"], [5], [(IntervalWindow._of(0, 10), IntervalWindow._of(5, 15))], None, None)
    assert window_columns(Sessions(3 / 1e6), two).windows == [(IntervalWindow._of(5, 8),) * 2]


@settings(max_examples=200, deadline=None)
@given(batches=st.lists(st.lists(_event, max_size=40), max_size=8), gap=st.integers(1, 30),
       max_cells=st.integers(1, 12), kind=st.sampled_from(["sweep", "general", "fixed"]),
       max_bytes=st.sampled_from([MAX_BYTES, 3000, 300]))
def test_a_full_table_emitted_early_merges_to_the_same_partials(batches, gap, max_cells, kind,
                                                                 max_bytes):
    # A table that `full` says to emit is emitted and starts again: its partials, merged per key
    # and window as the reduce side merges those of several workers, are the one table's. Its
    # bounds are `max_cells` cells and `max_bytes` estimated bytes.
    sessions = kind != "fixed"
    windowfn = {"sweep": Sessions, "general": _GeneralSessions, "fixed": FixedWindows}[kind](gap / 1e6)
    windowing = Windowing(windowfn)
    emit = lambda kb, k, a, ts, w: (k, w, ts, a)  # noqa: E731
    whole = PartialCombiner("Combine", _Collect(), windowing)
    bounded = PartialCombiner("Combine", _Collect(), windowing, max_cells=max_cells,
                              max_bytes=max_bytes)
    parts = []
    for batch in batches:
        triples = [((k, v), ts, windowfn._assign(None, ts, (None,) * copies))
                   for k, v, ts, copies in batch]
        whole.add_all(triples)
        bounded.add_all(triples)
        assert bounded.cells == _held(bounded)
        if bounded.full():
            assert bounded.cells == _held(bounded)
            assert bounded.cells > max_cells // 2 or bounded.estimated_bytes() > max_bytes // 2
            assert max_bytes < MAX_BYTES or bounded.cells > max_cells // 2  # small accumulators
            parts.extend(bounded.emit(emit))
            assert bounded.cells == 0 and bounded.estimated_bytes() == 0
        else:
            assert bounded.cells == _held(bounded) and bounded.cells <= max_cells
            assert bounded.estimated_bytes() <= max_bytes
    parts.extend(bounded.emit(emit))
    assert _merged(parts, sessions) == _merged(list(whole.emit(emit)), sessions)


def _held(partial):
    if partial.sessions:
        return sum(len(e[1]) + len(e[2]) for e in partial.swept.values())
    return sum(len(windows) for _, windows in partial.table.values())


def _merged(partials, sessions):
    """Per key, the partials merged as the reduce side merges them: sessions that overlap joined,
    equal windows' accumulators joined; the earliest timestamp kept."""
    by_key = {}
    for k, w, ts, acc in partials:
        by_key.setdefault(repr(k), []).append([w.start_us, w.end_us, ts, list(acc)])
    out = {}
    for k, cells in by_key.items():
        cells.sort()
        joined = []
        for s, e, ts, acc in cells:
            last = joined[-1] if joined else None
            if last is not None and (s < last[1] if sessions else (s, e) == (last[0], last[1])):
                last[1], last[2] = max(last[1], e), min(last[2], ts)
                last[3] = sorted(last[3] + acc)
            else:
                joined.append([s, e, ts, sorted(acc)])
        out[k] = joined
    return out


class _Growing(_Collect):
    """Keeps every input and its text: an accumulator that grows with its inputs (as ToList's)."""

    def add_input(self, acc, v):
        acc.append((v, str(v)))
        return acc


@pytest.mark.parametrize("windowfn", [FixedWindows(3600), Sessions(600)], ids=["fixed", "sessions"])
def test_growing_accumulators_are_bounded_by_their_estimated_bytes(windowfn):
    # Four keys' accumulators keep every input: four cells, far below any count bound, whose
    # memory grows with the partition. The table's memory (traced) stays within twice
    # max_bytes (estimates lag the growth by at most half), and its early emits merge to the
    # partials of one unbounded table.
    windowing = Windowing(windowfn)
    batches = [[((f"k{i % 4}", b * 200 + i), (b * 200 + i) % 7200, windowfn._assign(None, 0, (None,)))
                for i in range(200)] for b in range(800)]
    max_bytes = 4_000_000
    emit = lambda kb, k, a, ts, w: (k, w, ts, a)  # noqa: E731
    gc.collect()
    tracemalloc.start()
    peak = 0
    try:  # the table's memory, its emits dropped
        bounded = PartialCombiner("Combine", _Growing(), windowing, max_bytes=max_bytes)
        base = tracemalloc.get_traced_memory()[0]
        for batch in batches:
            bounded.add_all(batch)
            if bounded.full():
                for _ in bounded.emit(emit):
                    pass
            peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * max_bytes
    bounded = PartialCombiner("Combine", _Growing(), windowing, max_bytes=max_bytes)
    whole = PartialCombiner("Combine", _Growing(), windowing)
    parts, emits = [], 0
    for batch in batches:
        bounded.add_all(batch)
        whole.add_all(batch)
        if bounded.full():
            emits += 1
            parts.extend(bounded.emit(emit))
    parts.extend(bounded.emit(emit))
    assert emits >= 3
    assert _merged(parts, windowfn.is_merging()) == _merged(list(whole.emit(emit)), windowfn.is_merging())


@pytest.mark.parametrize("windowfn", [FixedWindows(3600), Sessions(600)], ids=["fixed", "sessions"])
def test_the_estimate_of_a_cell_is_near_its_traced_bytes(windowfn):
    # Sums per key and window: the table's estimated bytes are those tracemalloc sees it take
    # (within 0.7x-2x: the estimate errs on the large side).
    windowing = Windowing(windowfn)
    triples = [((f"user-{i * 7919 % 997}", i % 1000), ts, windowfn._assign(None, ts, (None,)))
               for i in range(60_000) for ts in [(i * 104_729) % (7 * 86_400) * 10**6]]
    partial = PartialCombiner("Combine", SumCombineFn(), windowing, max_cells=10**9, max_bytes=1 << 40)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for i in range(0, len(triples), 1000):
            partial.add_all(triples[i:i + 1000])
        if partial.sessions:
            for entry in partial.swept.values():
                partial._sweep(entry)
        traced = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    partial.full()
    assert partial.cells > 10_000
    assert 0.7 * traced <= partial.estimated_bytes() <= 2 * traced


def test_deep_size_counts_each_object_once_and_extrapolates_past_its_limit():
    class Slotted:
        __slots__ = ("a", "b")

        def __init__(self, a, b):
            self.a, self.b = a, b

    class Plain:
        def __init__(self, x):
            self.x = x

    text = "y" * 1000
    shared = [text, text]
    plain = Plain(text)
    slotted = Slotted(text, plain)
    row = (shared, shared, slotted)
    outer = {"k": row}
    size, visited = deep_size(outer, set(), 10**6)
    attribute = next(iter(vars(plain)))  # "x", as the instance's dictionary holds it
    parts = [outer, "k", row, shared, text, slotted, plain, vars(plain), attribute]
    assert size == sum(sys.getsizeof(p) for p in parts) and visited == len(parts)
    seen = set()
    deep_size(text, seen, 10)
    assert deep_size([text], seen, 10) == (sys.getsizeof([text]), 1)  # the text was seen already
    big = [str(i) * 10 for i in range(10_000)]
    estimate, visited = deep_size(big, set(), 1_000)
    exact = deep_size(big, set(), 10**6)[0]
    assert visited == 1_000 and 0.8 * exact <= estimate <= 1.2 * exact
    assert deep_size(Plain, set(), 10) == (sys.getsizeof(Plain), 1)  # a class is not followed

    class Proxy:
        def __getattribute__(self, name):
            raise RuntimeError("no attributes here")

    proxy = Proxy()
    assert deep_size([proxy], set(), 10) == (sys.getsizeof([proxy]) + sys.getsizeof(proxy), 2)
