"""The columnar shuffle of the vectorised combines (`VectorCombiner`) into a grouping whose every
window gets one pane (`ReduceFnRunner.one_pane_per_window`).

A map partition's groups of an emit cross the shuffle as `GroupBlock`s, per reduce partition
and of at most `_MAX_ROWS` rows of whole keys: numpy columns of (key, window, accumulator,
count, kept timestamp, map partition and emit) rows and the block's keys with their key bytes,
under the record key (reduce partition, map partition, emit), which
`batch.map_side.partition_of` routes as it is. A key's rows all go to the reduce partition its
records would go to (the crc32 of its key bytes, modulo the partitions).

The reduce side of such a grouping (`block_panes`) orders a partition's rows as the record path
orders its records, by (key bytes, sort time, map partition, emit), and merges each window's
rows as `ReduceFnRunner.final_panes` merges the records' partial accumulators: integer totals,
counts and extrema at once, float sums one row after another from 0, as `merge_accumulators`
adds them; each window's pane at the hold its rows keep (or the window's end under
OUTPUT_AT_EOW), ON_TIME, first and last. The blocks of a reduce partition are held in memory up
to a budget of their bytes, and beyond it spilled in sub-buckets of their keys, each reduced on
its own (`BlockStore`). A partition that also holds ordinary records (a map partition whose
bundle the vectorised combiner refused) takes its blocks as the records they stand for
(`BlockRecords`) and is sorted and reduced as records are.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import zlib
from itertools import repeat
from typing import IO, Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple, Union

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.model import coders
from headrace.model.reduce import FINAL_PANE
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.window import GLOBAL_WINDOW, GLOBAL_WINDOWS_TUPLE, GlobalWindows, IntervalWindow
from headrace.model.windowed import WindowedValue
from headrace.runners.spark.fastpath.columns import narrowed, running_max_end, widened
from headrace.runners.spark.fastpath.evaluate import _TIME_GUARD
from headrace.runners.spark.fastpath.tracer import _I64_MAX

__all__ = ["GroupBlock", "NarrowBlock", "split_blocks", "block_panes", "BlockStore", "BlockRecords",
           "sort_blocks_apart"]

_OUT_CHUNK = 1 << 16        # groups turned into Python objects at a time
_SUB_BUCKETS = 64           # sub-buckets of a reduce partition's keys once its blocks spill
_MAX_ROWS = 1 << 12         # rows of a block (about 280 kB), unless one key has more
_GOLDEN = np.uint64(2654435761)


_ROW_COLUMNS = ("start", "end", "n", "ts")   # (and acc, which `_accs` concatenates)


class GroupBlock(NamedTuple):
    """Groups bound for one reduce partition (one map partition's emit, as the map side sends
    them; several, merged where they spill): per key entry (its local code) `kbs` (key bytes),
    `crc` (their crc32) and `keys`; per row (key and window) the rest. `pe` is the row's map
    partition << 32 | the partition's emit; `acc` is the total (sum or mean), extremum (min,
    max) or zeros (count); `n` counts the inputs; `ts` is the kept timestamp (earliest, or
    latest under OUTPUT_AT_LATEST)."""
    pe: np.ndarray         # int64
    kbs: pa.Array          # large_binary
    crc: np.ndarray        # uint32
    keys: pa.Array         # string or int64
    code: np.ndarray       # int64, a row's key
    start: np.ndarray
    end: np.ndarray
    acc: np.ndarray
    n: np.ndarray
    ts: np.ndarray

    def nbytes(self) -> int:
        """The bytes of its columns."""
        return (self.kbs.nbytes + self.keys.nbytes + self.crc.nbytes
                + sum(a.nbytes for a in (self.pe, self.code, self.start, self.end, self.acc, self.n,
                                         self.ts)))

    def __reduce__(self) -> Tuple[Any, tuple]:
        """Pickled narrow (`columns.narrowed`): each int64 column as offsets from its least value in the
        narrowest unsigned type that holds them, the ends and kept timestamps first less the
        starts (a block of sessions' rows pickles to about a fifth of its bytes); it unpickles
        as the `NarrowBlock` it stands for."""
        return (NarrowBlock, (self.kbs, self.crc, self.keys, narrowed(self.pe), narrowed(self.code),
                              narrowed(self.start), narrowed(self.end, self.start), narrowed(self.acc),
                              narrowed(self.n), narrowed(self.ts, self.start)))

    def wide(self) -> "GroupBlock":
        """Itself (see `NarrowBlock.wide`)."""
        return self

    @staticmethod
    def merged(blocks: List["GroupBlock"]) -> "GroupBlock":
        """One block of the rows of `blocks` (a key may then have several entries; accumulators
        as `_accs` joins them: integer and float ones of different map partitions stay the
        Python numbers they are)."""
        if len(blocks) == 1:
            return blocks[0]
        offsets = np.cumsum([0] + [len(b.kbs) for b in blocks[:-1]])
        start, end, n, ts = (np.concatenate([getattr(b, f) for b in blocks]) for f in _ROW_COLUMNS)
        return GroupBlock(np.concatenate([b.pe for b in blocks]), pa.concat_arrays([b.kbs for b in blocks]),
                          np.concatenate([b.crc for b in blocks]), _concat_keys(blocks),
                          np.concatenate([b.code + off for b, off in zip(blocks, offsets.tolist())]),
                          start, end, _accs(blocks), n, ts)

    def split(self, dest: np.ndarray, parts: int) -> Iterator[Tuple[int, "GroupBlock"]]:
        """(p, a block of keys whose `dest` is p) for each p of range(`parts`) that has rows, a
        key's rows in one block, a block of more than `_MAX_ROWS` rows only for a key that has
        them: keys are ordered by destination once and rows by their key's place in that order,
        then sliced (a block stays a small record in the shuffle: PySpark pickles 20 records at
        a time at first, the JVM keeps a direct buffer as large as the largest array it writes,
        and G1 grows its heap to the limit under arrays of several MB at a high rate)."""
        korder = np.argsort(dest, kind="stable")                      # keys by destination
        kbounds = np.searchsorted(dest[korder], np.arange(parts + 1))
        place = np.empty(len(korder), np.int64)                       # a key's place in korder
        place[korder] = np.arange(len(korder))
        row_place = place[self.code]
        rorder = np.argsort(row_place, kind="stable")                 # rows by their key's place
        row_place = row_place[rorder]
        for p in range(parts):
            lo, hi = np.searchsorted(row_place, kbounds[p:p + 2])
            while lo < hi:   # rows lo..end of keys first..last: at most _MAX_ROWS, whole keys
                end = int(hi)
                if lo + _MAX_ROWS < hi:    # up to the key that does not fit, or that key alone
                    over = row_place[lo + _MAX_ROWS]
                    end = int(np.searchsorted(row_place, over, side="left"))
                    if end == lo:
                        end = int(np.searchsorted(row_place, over, side="right"))
                first, last = int(row_place[lo]), int(row_place[end - 1])
                mine = korder[first:last + 1]
                ks = pa.array(mine)
                rows = rorder[lo:end]
                yield p, GroupBlock(self.pe[rows], self.kbs.take(ks), self.crc[mine], self.keys.take(ks),
                                    row_place[lo:end] - first, self.start[rows], self.end[rows],
                                    self.acc[rows], self.n[rows], self.ts[rows])
                lo = end


class NarrowBlock:
    """A `GroupBlock` as the shuffle brings it and a reduce partition's `BlockStore` holds it:
    its int64 columns narrow, as pickled (`GroupBlock.__reduce__`), until `wide()` makes the
    block (a store of sessions' blocks holds about a fifth of their bytes)."""

    __slots__ = ("args",)

    def __init__(self, *args: Any) -> None:
        self.args = args

    def __reduce__(self) -> Tuple[Any, tuple]:
        return (NarrowBlock, self.args)

    def nbytes(self) -> int:
        """The bytes of the block's columns once wide (what a `BlockStore` budgets)."""
        kbs, crc, keys = self.args[:3]
        rows = (c.nbytes if isinstance(c, np.ndarray) else 8 * len(c[1]) for c in self.args[3:])
        return kbs.nbytes + keys.nbytes + crc.nbytes + sum(rows)

    def wide(self) -> GroupBlock:
        """The block, its columns int64 again (the values pickled)."""
        kbs, crc, keys, pe, code, start, end, acc, n, ts = self.args
        s = widened(start)
        return GroupBlock(widened(pe), kbs, crc, keys, widened(code), s, widened(end, s), widened(acc),
                          widened(n), widened(ts, s))


def split_blocks(part: int, emit: int, parts: int, kbs: pa.Array, keys: pa.Array, code: np.ndarray,
                 start: np.ndarray, end: np.ndarray, acc: np.ndarray, n: np.ndarray, ts: np.ndarray
                 ) -> Iterator[Tuple[Tuple[int, int, int], GroupBlock]]:
    """A map partition's groups as shuffle records ((reduce partition, part, emit), block), cut
    per reduce partition of `parts` that has some (`GroupBlock.split`): a key goes where
    `partition_of` sends its records (the crc32 of its key bytes `kbs[code]`, large_binary,
    modulo `parts`)."""
    crc = np.fromiter(map(zlib.crc32, kbs.to_pylist()), np.uint32, len(kbs))
    pe = np.full(len(code), part << 32 | emit, np.int64)
    whole = GroupBlock(pe, kbs, crc, keys, code, start, end, acc, n, ts)
    for p, block in whole.split((crc % parts).astype(np.int64), parts):
        yield (p, part, emit), block


# ---- the reduce side --------------------------------------------------------------------------

def block_panes(blocks: List[GroupBlock], combine_fn: Any, windowing: Windowing, what: str
                ) -> Iterator[WindowedValue]:
    """The panes of a reduce partition's blocks (see the module docstring), by key bytes and,
    within a key, by window; `what` is the combine ("sum", "count", "mean", "min", "max")."""
    if not blocks:
        return
    windowfn = windowing.windowfn
    merging = windowfn.is_merging()
    is_global = type(windowfn) is GlobalWindows
    latest = windowing.timestamp_combiner is TimestampCombiner.OUTPUT_AT_LATEST
    eow = windowing.timestamp_combiner is TimestampCombiner.OUTPUT_AT_EOW
    m = GroupBlock.merged(blocks)
    # Each key entry's rank among the partition's key bytes, and each row's.
    enc = pc.dictionary_encode(m.kbs)
    rank = np.empty(len(enc.dictionary), np.int64)
    rank[pc.sort_indices(enc.dictionary).to_numpy()] = np.arange(len(enc.dictionary))
    kid = rank[enc.indices.to_numpy()][m.code]
    t = np.minimum(m.start, m.ts) if merging else m.ts   # the records' sort time (`map_side._sort_time`)
    order = _row_order(m.pe, kid, t)
    kid, start, end, ts, gk = kid[order], m.start[order], m.end[order], m.ts[order], m.code[order]
    first = np.ones(len(kid), bool)
    first[1:] = kid[1:] != kid[:-1]
    if merging:   # a session takes in each row that overlaps it (rows by start: see `_sort_time`)
        first[1:] |= start[1:] >= running_max_end(kid, end)[:-1]
    else:
        first[1:] |= start[1:] != start[:-1]
    idx = np.flatnonzero(first)
    counts = np.add.reduceat(m.n[order], idx)
    totals: Any = None
    if what != "count":
        acc = _accs([m])[order]     # (int64 unless the partition's sums could overflow it)
        if what == "min":
            totals = np.minimum.reduceat(acc, idx)
        elif what == "max":
            totals = np.maximum.reduceat(acc, idx)
        elif acc.dtype == np.int64:
            totals = np.add.reduceat(acc, idx)
        else:
            totals = _sequential_sums(acc, idx)
    wstart = start[idx]
    wend = np.maximum.reduceat(end, idx) if merging else end[idx]
    if not eow:
        hold = (np.maximum if latest else np.minimum).reduceat(ts, idx)
    elif is_global:
        hold = np.full(len(idx), GLOBAL_WINDOW.end_us - 1, np.int64)
    else:
        hold = wend - 1
    keys = m.keys
    key_rows = gk[idx]
    windows: Dict[int, Tuple[Any, ...]] = {}    # (window,) tuples by start, shared by panes
    plain = what != "mean"     # Sum, Count, Min, Max: an accumulator of some inputs is the output
    for lo in range(0, len(idx), _OUT_CHUNK):
        hi = lo + _OUT_CHUNK
        n = np.ascontiguousarray(counts[lo:hi], np.int64).data
        accs = combine_fn.accumulators_from(n if totals is None else totals[lo:hi].tolist(), n)
        values = accs if plain else map(combine_fn.extract_output, accs)
        ks = keys.take(pa.array(key_rows[lo:hi])).to_pylist()
        wss = (repeat(GLOBAL_WINDOWS_TUPLE) if is_global
               else _window_tuples(wstart[lo:hi].tolist(), wend[lo:hi].tolist(), windows))
        for k, v, ws, h in zip(ks, values, wss, hold[lo:hi].tolist()):
            yield WindowedValue((k, v), h, ws, FINAL_PANE)
        if len(windows) > _OUT_CHUNK:
            windows.clear()


def _window_tuples(starts: List[int], ends: List[int], cache: Dict[int, Tuple[Any, ...]]
                   ) -> List[Tuple[Any, ...]]:
    """(IntervalWindow,) per (start, end), one tuple per start while its end stays the same."""
    out = []
    for s, e in zip(starts, ends):
        ws = cache.get(s)
        if ws is None or ws[0].end_us != e:
            ws = cache[s] = (IntervalWindow._of(s, e),)
        out.append(ws)
    return out


def _row_order(pe: np.ndarray, kid: np.ndarray, t: np.ndarray) -> np.ndarray:
    """The permutation that orders rows by (key rank `kid`, sort time `t`, map partition and
    emit `pe`), as the record path's records are ordered (a key's rows of one emit differ in
    time): one int64 sort key when it cannot overflow (`pe` ranked among its values), else
    numpy's lexsort."""
    values = np.unique(pe)
    lo = int(t.min())
    span = int(t.max()) - lo + 1
    if (int(kid.max()) + 1) * span * len(values) < _TIME_GUARD:
        rank = np.searchsorted(values, pe) if len(values) > 1 else 0
        return np.argsort((kid * span + (t - lo)) * len(values) + rank)
    return np.lexsort((pe, t, kid))


def _accs(blocks: List[GroupBlock]) -> np.ndarray:
    """The blocks' accumulator columns as one: int64 unless a sum could overflow it (then Python
    ints, widened as a sum whatever the combine: exact for extrema too), float64 if all are
    floats, else Python numbers (added as Python adds them)."""
    accs = [b.acc for b in blocks]
    kinds = {a.dtype.kind for a in accs}
    if kinds == {"i"}:
        return wide("sum", accs[0] if len(accs) == 1 else np.concatenate(accs))
    if kinds == {"f"}:
        return accs[0] if len(accs) == 1 else np.concatenate(accs)
    return np.concatenate([a.astype(object) for a in accs])


def wide(what: str, acc: np.ndarray) -> np.ndarray:
    """Integer sums as Python ints when int64 could overflow (never for realistic inputs)."""
    if what in ("sum", "mean") and acc.dtype == np.int64 and len(acc) and \
            max(abs(int(acc.min())), abs(int(acc.max()))) * len(acc) > _I64_MAX:
        return acc.astype(object)
    return acc


def _sequential_sums(acc: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per segment of `acc` starting at `idx`: 0 + its first + its second + ..., in that order
    (the float sums `SumCombineFn.merge_accumulators` makes of accumulators merged one by one)."""
    bounds = np.append(idx, len(acc))
    length = np.diff(bounds)
    out = np.zeros(len(idx), acc.dtype) if acc.dtype != object else np.array([0] * len(idx), object)
    by_length = np.argsort(-length, kind="stable")     # segments, longest first
    lengths = length[by_length]
    for j in range(int(lengths[0]) if len(lengths) else 0):
        live = by_length[:np.searchsorted(-lengths, -j, side="left")]   # segments longer than j
        out[live] = out[live] + acc[idx[live] + j]
    return out


def _concat_keys(blocks: List[GroupBlock]) -> pa.Array:
    """The blocks' keys as one array (of Python objects if their types differ)."""
    types = {b.keys.type if isinstance(b.keys, pa.Array) else None for b in blocks}
    if len(types) == 1 and None not in types:
        return pa.concat_arrays([b.keys for b in blocks])
    values: List[Any] = []
    for b in blocks:
        values.extend(b.keys.to_pylist())
    return _PyList(values)


class _PyList:
    """A list with `take(indices).to_pylist()`, as the arrow arrays `block_panes` reads."""

    def __init__(self, values: List[Any]) -> None:
        self.values = values

    def take(self, indices: pa.Array) -> "_PyList":
        values = self.values
        return _PyList([values[i] for i in indices.to_pylist()])

    def to_pylist(self) -> List[Any]:
        return self.values

    @property
    def nbytes(self) -> int:
        """A rough size (64 bytes a key)."""
        return 64 * len(self.values)

    def __len__(self) -> int:
        return len(self.values)


# ---- a reduce partition's blocks, held or spilled ------------------------------------------------

class BlockStore:
    """A reduce partition's blocks, in memory up to `budget` bytes of their columns; beyond it,
    the blocks held are merged a quarter budget at a time and split into `_SUB_BUCKETS`
    sub-buckets of their keys (a hash of their crc32), each appended to its sub-bucket's file in
    Spark's local directories, and so are the blocks that come after, whenever a quarter of the
    budget of them is held. `groups` gives them back as key-disjoint lists, each reduced on its
    own."""

    def __init__(self, budget: float) -> None:
        self.budget = budget
        self.held: List[Union[GroupBlock, NarrowBlock]] = []
        self.bytes = 0
        self.files: Optional[List[Optional[IO[bytes]]]] = None   # per sub-bucket, once spilled

    def add(self, block: Union[GroupBlock, NarrowBlock]) -> None:
        """Holds the block (narrow as it came); spills what it holds past its budget (a quarter
        once spilling)."""
        self.held.append(block)
        self.bytes += block.nbytes()
        if self.bytes > (self.budget if self.files is None else self.budget / 4):
            self._spill()

    def _spill(self) -> None:
        """Writes the blocks held to the sub-buckets' files, merged a quarter budget at a time
        (merging all at once would copy them all), and forgets them as they go."""
        if self.files is None:
            self.files = [None] * _SUB_BUCKETS
        held, self.held, self.bytes = self.held, [], 0
        while held:
            group = [held.pop()]
            size = group[0].nbytes()
            while held and size < self.budget / 4:
                group.append(held.pop())
                size += group[-1].nbytes()
            merged = GroupBlock.merged([b.wide() for b in group])
            del group
            self._write(merged)

    def _write(self, held: GroupBlock) -> None:
        """Appends a block's rows to their sub-buckets' files."""
        assert self.files is not None
        for s, part in held.split(_sub_bucket(held.crc), _SUB_BUCKETS):
            f = self.files[s]
            if f is None:
                local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
                f = self.files[s] = tempfile.TemporaryFile(
                    prefix="headrace-blocks-", dir=local if local and os.path.isdir(local) else None)
            pickle.dump(part, f, protocol=pickle.HIGHEST_PROTOCOL)

    def spilled(self) -> bool:
        """Whether its blocks went to files."""
        return self.files is not None

    def groups(self) -> Iterator[List[GroupBlock]]:
        """Its blocks, in lists of which no two share a key (one list if none spilled); the
        files are closed, and gone, as they are read."""
        if self.files is None:
            held, self.held = self.held[::-1], []
            if held:
                wide = []
                while held:   # (each narrow block let go as it is widened)
                    wide.append(held.pop().wide())
                yield wide
            return
        if self.held:
            self._spill()
        files, self.files = self.files, None
        for f in files:
            if f is not None:
                yield [b.wide() for b in _read(f)]

    def drain(self) -> Iterator[GroupBlock]:
        """Every block, held or spilled (which empties it)."""
        for group in self.groups():
            yield from group


def _sub_bucket(crc: np.ndarray) -> np.ndarray:
    """A key's sub-bucket from its crc32 (whose low bits the reduce partitions already split):
    a multiplicative hash's high bits."""
    return (((crc.astype(np.uint64) * _GOLDEN) & np.uint64(0xFFFFFFFF)) >> np.uint64(26)).astype(np.int64)


def _read(f: IO[bytes]) -> Iterator[NarrowBlock]:
    with f:
        f.seek(0)
        while True:
            try:
                yield pickle.load(f)
            except EOFError:
                return


# ---- blocks as the records they stand for ---------------------------------------------------------

class BlockRecords:
    """A grouping's blocks as its map side's partial-accumulator records, ((key bytes, sort time,
    False, map partition, emit), (key, accumulator, timestamp, window)), for a reduce partition
    that also holds ordinary records. Picklable; the CombineFn is unpickled on first use."""

    def __init__(self, combine_fn_bytes: bytes, windowing: Windowing, what: str) -> None:
        self.combine_fn_bytes = combine_fn_bytes
        self.merging = windowing.windowfn.is_merging()
        self.is_global = type(windowing.windowfn) is GlobalWindows
        self.what = what
        self._combine_fn: Any = None

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_combine_fn": None}

    def __call__(self, narrow: Union[GroupBlock, NarrowBlock]) -> Iterator[Tuple[tuple, tuple]]:
        """The block's records."""
        block = narrow.wide()
        if self._combine_fn is None:
            self._combine_fn = coders.loads(self.combine_fn_bytes)
        fn = self._combine_fn
        counts = np.ascontiguousarray(block.n, np.int64).data
        accs = fn.accumulators_from(counts if self.what == "count" else block.acc.tolist(), counts)
        kbs = block.kbs.to_pylist()
        keys = block.keys.to_pylist()
        compact = fn.compact
        merging = self.merging
        w: Any = GLOBAL_WINDOW
        for c, a, s, e, ts, pe in zip(block.code.tolist(), accs, block.start.tolist(), block.end.tolist(),
                                      block.ts.tolist(), block.pe.tolist()):
            if not self.is_global:
                w = IntervalWindow._of(s, e)
            t = (s if s < ts else ts) if merging else ts
            yield (kbs[c], t, False, pe >> 32, pe & 0xFFFFFFFF), (keys[c], compact(a), ts, w)


def sort_blocks_apart(records: Iterator[Tuple[Any, Any]], store: BlockStore,
                      explode: Optional[Callable[[Any], Iterator[Tuple[Any, Any]]]]
                      ) -> Iterator[Tuple[Any, Any]]:
    """The ordinary records of a shuffled partition; its blocks go to `store` until an ordinary
    record comes, and from then on (those held first) as the records they stand for
    (`explode`)."""
    mixed = False
    for r in records:
        if r[0][0].__class__ is int:     # a block's key: (reduce partition, part, emit)
            if mixed:
                assert explode is not None
                yield from explode(r[1])
            else:
                store.add(r[1])
            continue
        if not mixed:
            mixed = True
            for b in store.drain():
                assert explode is not None, "a grouping's blocks came without a way to read them as records"
                yield from explode(b)
        yield r
