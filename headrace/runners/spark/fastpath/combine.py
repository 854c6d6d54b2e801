"""The built-in combines (sum, count, mean, min, max) per key and window over vectorised bundles.

`VectorCombiner` accumulates the evaluated bundles of a partition into (key, window) groups as
arrays (sort, `reduceat`), compacting them as they grow, and emits one accumulator per group,
built by the CombineFn's own `accumulators_from` (`SumCombineFn`, `CountCombineFn`,
`MeanCombineFn`; `MinCombineFn` and `MaxCombineFn` over integers).

These are numpy twins of model rules, with their parameters taken from the model objects and
tested against the model (tests/model/test_vectorized.py runs `ReduceFnRunner`): fixed windows
are [ts - (ts - offset) mod size, + size) with the FixedWindows' `offset_us` and `size_us`
(`FixedWindows._assign`); a Sessions' proto-sessions [t, t + `gap_size_us`) of a key merge when
they overlap and stay apart when they merely touch (`merge_overlapping_intervals`); a group keeps
the latest timestamp under the Windowing's TimestampCombiner.OUTPUT_AT_LATEST and the earliest
otherwise (`ReduceFnRunner._combine_holds`).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.model.combine import (CountCombineFn, MaxCombineFn, MeanCombineFn, MinCombineFn,
                                    SumCombineFn)
from headrace.model.window import GLOBAL_WINDOW, FixedWindows, GlobalWindows, IntervalWindow, Sessions
from headrace.model.strategy import Windowing
from headrace.runners.kit.partial import keeps_latest
from headrace.runners.spark.fastpath.blocks import GroupBlock, split_blocks, wide
from headrace.runners.spark.fastpath.columns import band, running_max_end
from headrace.runners.spark.fastpath.evaluate import (_FLOAT, _INT, _STR, _WINDOWFNS, _V,
                                                      VectorBundle)

__all__ = ["VectorCombiner", "vector_combiner"]


_COMBINES = {SumCombineFn: "sum", CountCombineFn: "count", MeanCombineFn: "mean",
             MinCombineFn: "min", MaxCombineFn: "max"}


def vector_combiner(combine_fn: Any, windowing: Windowing) -> Optional["VectorCombiner"]:
    """A VectorCombiner for a built-in CombineFn under a Global/Fixed/Sessions windowing, else None."""
    if type(combine_fn) not in _COMBINES or type(windowing.windowfn) not in _WINDOWFNS:
        return None
    return VectorCombiner(combine_fn, windowing)


class _Groups(NamedTuple):
    code: np.ndarray   # the key's index in VectorCombiner.keys
    start: np.ndarray  # window start (microseconds; 0 in the global window)
    end: np.ndarray    # window end
    acc: np.ndarray    # sum / min / max (int64, float64, or object for ints that could overflow)
    n: np.ndarray      # elements in the group (int64)
    ts: np.ndarray     # the kept timestamp (the earliest, or the latest)


class VectorCombiner:
    """Accumulates vectorised bundles per (key, window) (see the module docstring)."""

    def __init__(self, combine_fn: Any, windowing: Windowing) -> None:
        self.combine_fn = combine_fn
        self.what = _COMBINES[type(combine_fn)]
        self.windowfn = windowfn = windowing.windowfn
        self.merging = windowfn.is_merging()
        # The timestamp the model keeps for a group (ReduceFnRunner._combine_holds): the latest
        # under OUTPUT_AT_LATEST, else the earliest (the reducer that merges the accumulators
        # stamps OUTPUT_AT_EOW panes at the window's end itself).
        latest = keeps_latest(windowing)
        self.keep_ts = np.maximum if latest else np.minimum
        self.chunks: List[_Groups] = []
        self.chunk_keys: List[pa.Array] = []  # a chunk's keys, by its codes (distinct)
        self.rows = 0
        self.key_rows = 0                     # the chunks' keys (a key may be in several)
        self.limit = 1 << 18
        self.key_kind: Optional[str] = None
        self.value_kind: Optional[str] = None

    def accepts(self, bundle: VectorBundle) -> bool:
        """True when the bundle's elements are (key, number) pairs this combiner can add."""
        v = bundle.value
        if not (type(v) is tuple and len(v) == 2 and isinstance(v[0], _V) and isinstance(v[1], _V)):
            return False
        if bundle.windowfn != self.windowfn:  # WindowFns are equal only to their own type
            return False
        key, val = v
        if key.kind not in (_STR, _INT) or (self.key_kind not in (None, key.kind)):
            return False
        if self.what == "count":
            return True
        if self.value_kind not in (None, val.kind):
            return False  # int and float sums of a partition are never mixed in one array
        if self.what in ("min", "max"):
            return val.kind == _INT
        return val.kind in (_INT, _FLOAT)

    def add(self, bundle: VectorBundle) -> None:
        """Adds a bundle that `accepts` said yes to."""
        if bundle.n == 0:
            return
        key, val = bundle.value
        self.key_kind = key.kind
        self.value_kind = val.kind
        codes, keys = self._codes(bundle.column(key))
        ts = bundle.ts_array()
        acc = bundle.column(val) if self.what != "count" else np.zeros(bundle.n, np.int64)
        start, end = self._windows(ts)
        self.chunks.append(self._reduce([codes, start, end, wide(self.what, acc),
                                         np.ones(bundle.n, np.int64), ts]))
        self.chunk_keys.append(keys)
        self.rows += len(self.chunks[-1].start)
        self.key_rows += len(keys)
        if self.rows > self.limit:
            self._compact()
            self.limit = max(self.limit, 2 * self.rows)

    def _codes(self, keys: Any) -> Tuple[np.ndarray, pa.Array]:
        """Each key's code in the bundle, and the bundle's distinct keys by code (as
        large_string or int64, so that chunks' keys concatenate)."""
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        enc = pc.dictionary_encode(keys if isinstance(keys, pa.Array) else pa.array(keys))
        kind = pa.large_string() if self.key_kind == _STR else pa.int64()
        return enc.indices.to_numpy().astype(np.int64), enc.dictionary.cast(kind)

    def full(self, max_groups: int) -> bool:
        """Whether it holds more than `max_groups` groups (key and window) or keys even once
        compacted, keeping half of them free: the caller then emits it (`emit`), which empties
        it, its keys too (as `kit.partial.PartialCombiner.full` bounds its table)."""
        if self.rows <= max_groups and self.key_rows <= max_groups:
            return False
        self._compact()
        return self.rows > max_groups // 2 or self.key_rows > max_groups // 2

    def _windows(self, ts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        """Each timestamp's window bounds, as the WindowFn's `_assign` gives them."""
        fn = self.windowfn
        if type(fn) is GlobalWindows:
            zero = np.zeros(len(ts), np.int64)
            return zero, zero
        if type(fn) is FixedWindows:
            start = ts - np.remainder(ts - fn.offset_us, fn.size_us)
            return start, start + fn.size_us
        assert isinstance(fn, Sessions)  # the only other WindowFn vector_combiner accepts
        return ts, ts + fn.gap_size_us

    def _compact(self) -> None:
        """One chunk of its chunks, their keys encoded anew (the keys of all, distinct)."""
        if len(self.chunks) > 1:
            # The chunks' columns are concatenated one column at a time and each chunk's
            # dropped once it is (the reduce then gathers and drops them one at a time too):
            # at most about one copy of the rows is alive beside them, not three.
            cols: List[List[Any]] = [list(g) for g in self.chunks]
            self.chunks = []
            enc = pc.dictionary_encode(pa.concat_arrays(self.chunk_keys))
            offsets = np.cumsum([0] + [len(k) for k in self.chunk_keys[:-1]]).tolist()
            recode = enc.indices.to_numpy().astype(np.int64)
            merged: List[np.ndarray] = []
            for i in range(len(_Groups._fields)):
                merged.append(np.concatenate([recode[c[0] + off] for c, off in zip(cols, offsets)] if i == 0
                                             else [c[i] for c in cols]))
                for c in cols:
                    c[i] = None
            del cols
            merged[3] = wide(self.what, merged[3])
            self.chunks = [self._reduce(merged)]
            self.chunk_keys = [enc.dictionary]
        self.rows = len(self.chunks[0].start) if self.chunks else 0
        self.key_rows = len(self.chunk_keys[0]) if self.chunk_keys else 0

    def _reduce(self, columns: List[Any]) -> _Groups:
        """One row per (key, window) of the rows whose `_Groups` columns `columns` holds: per
        window, or per merged session. Empties `columns`, so that a column no one else holds is
        freed once it has been gathered."""
        code, start, end, acc, counts, ts = columns
        columns.clear()
        n = len(code)
        if not n:
            return _Groups(code, start, end, acc, counts, ts)
        order = _order(code, start)
        code, start, end = code[order], start[order], end[order]
        first = np.ones(n, bool)
        first[1:] = code[1:] != code[:-1]
        if self.merging:
            first[1:] |= start[1:] >= running_max_end(code, end)[:-1]
        else:
            first[1:] |= start[1:] != start[:-1]
        idx = np.flatnonzero(first)
        del first
        red = np.minimum if self.what == "min" else np.maximum if self.what == "max" else np.add
        end = np.maximum.reduceat(end, idx)
        acc = red.reduceat(acc[order], idx)
        counts = np.add.reduceat(counts[order], idx)
        ts = self.keep_ts.reduceat(ts[order], idx)
        return _Groups(code[idx], start[idx], end, acc, counts, ts)

    def emit(self, key_bytes: Callable[[Any], bytes],
             record: Callable[[bytes, Any, Any, int, Any], Any]) -> Iterator[Any]:
        """Yields `record(key bytes, key, accumulator, timestamp, window)` for every group."""
        for kb, k, a, t, w, _ in self._groups(key_bytes):
            yield record(kb, k, a, t, w)

    def emit_counted(self, key_bytes: Callable[[Any], bytes]
                     ) -> Iterator[Tuple[bytes, Any, List[Tuple[Any, Any, int, int]]]]:
        """Yields (key bytes, key, [(window, accumulator, timestamp, inputs it holds), ...]) per
        key, as `PartialCombiner.emit_counted` does (accumulators compacted)."""
        compact = self.combine_fn.compact
        current: Optional[bytes] = None
        key: Any = None
        cells: List[Tuple[Any, Any, int, int]] = []
        for kb, k, a, t, w, n in self._groups(key_bytes):   # grouped by key (sorted by code)
            if kb != current:
                if current is not None:
                    yield current, key, cells
                current, key, cells = kb, k, []
            cells.append((w, compact(a), t, n))
        if current is not None:
            yield current, key, cells

    def emit_blocks(self, key_bytes: Callable[[Any], bytes], parts: int, part: int, emit: int
                    ) -> Iterator[Tuple[Tuple[int, int, int], GroupBlock]]:
        """The groups as columnar shuffle records, `GroupBlock`s cut per reduce partition of
        `parts` (`blocks.split_blocks`), of map partition `part`'s `emit`; empties it."""
        taken = self._take()
        if taken is None:
            return
        g, keys = taken
        kbs = encoded_keys(keys)
        if kbs is None:
            kbs = pa.array([key_bytes(k) for k in keys.to_pylist()], pa.large_binary())
        yield from split_blocks(part, emit, parts, kbs, keys, g.code, g.start, g.end, g.acc, g.n, g.ts)

    def _take(self) -> Optional[Tuple[_Groups, pa.Array]]:
        """Its groups, compacted, a float total +0.0 (the model's sums start at 0, so a sum of
        -0.0s is 0.0), and their keys by code; None if it has none. Empties it."""
        self._compact()
        if not self.chunks:
            return None
        g, keys = self.chunks[0], self.chunk_keys[0]
        self.chunks, self.chunk_keys = [], []
        self.rows = self.key_rows = 0
        if self.what in ("sum", "mean") and g.acc.dtype == np.float64:
            g = g._replace(acc=g.acc + 0.0)
        return g, keys

    def _groups(self, key_bytes: Callable[[Any], bytes]) -> Iterator[Tuple[bytes, Any, Any, int, Any, int]]:
        """(key bytes, key, accumulator, timestamp, window, inputs) of every group, by key; the
        combiner is empty afterwards."""
        taken = self._take()
        if taken is None:
            return
        g, key_array = taken
        acc = g.acc
        # The CombineFn builds its accumulators from each group's total (sum, min or max; a
        # count's is its count) and count, the counts as a memoryview: a sequence of Python
        # ints that costs nothing unless the CombineFn reads it.
        counts = np.ascontiguousarray(g.n, np.int64).data
        accs = self.combine_fn.accumulators_from(counts if self.what == "count" else acc.tolist(), counts)
        keys = key_array.to_pylist()
        kbs: List[Optional[bytes]] = [None] * len(keys)
        windows: Dict[Tuple[int, int], Any] = {}
        is_global = type(self.windowfn) is GlobalWindows
        w: Any
        for c, a, t, s, e, n in zip(g.code.tolist(), accs, g.ts.tolist(), g.start.tolist(), g.end.tolist(),
                                    g.n.tolist()):
            kb = kbs[c]
            if kb is None:
                kb = kbs[c] = key_bytes(keys[c])
            if is_global:
                w = GLOBAL_WINDOW
            else:
                w = windows.get((s, e))
                if w is None:
                    w = windows[(s, e)] = IntervalWindow._of(s, e)
            yield kb, keys[c], a, t, w, n


def encoded_keys(keys: pa.Array) -> Optional[pa.Array]:
    """The grouping bytes of str or int keys (`coders.encode_key`: b"s" and the UTF-8 bytes, or
    b"i" and 8 bytes big-endian), computed over the array; None if it has nulls."""
    if keys.null_count:
        return None
    if pa.types.is_integer(keys.type):
        n = len(keys)
        data = np.empty((n, 9), np.uint8)
        data[:, 0] = ord("i")
        data[:, 1:] = keys.to_numpy().astype(">i8").view(np.uint8).reshape(n, 8)
        offsets = np.arange(0, 9 * n + 1, 9, dtype=np.int64)
        return pa.LargeBinaryArray.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets),
                                                                       pa.py_buffer(data)])
    binary = keys.cast(pa.large_string()).cast(pa.large_binary())
    return pc.binary_join_element_wise(pa.scalar(b"s", pa.large_binary()), binary,
                                       pa.scalar(b"", pa.large_binary()))


def _order(code: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The permutation that sorts rows by (code, value)."""
    banded = band(code, value)
    return np.lexsort((value, code)) if banded is None else np.argsort(banded)
