"""The map side of a lifted combine: partial accumulators per key and window, before a shuffle.

A CombinePerKey whose trigger looks only at the watermark, with no retractions coming in, can
combine each worker's elements before they are shuffled (Beam's combiner lifting): the reduce
side then merges one partial accumulator per worker, key and window with
`merge_accumulators`. With a merging WindowFn, the windows of each key are merged as they
accumulate (and once more at the end), their accumulators merged. Each accumulator carries the
timestamp the TimestampCombiner keeps of its inputs: the earliest, or the latest for
OUTPUT_AT_LATEST (the core then derives the pane's timestamp from it as from an element's).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, Optional, Tuple

from headrace.model.combine import CombineFn
from headrace.model.window import BoundedWindow, TimestampCombiner, WindowFn, Windowing
from headrace.runners.kit.grouping import grouping_key_bytes, key_of, split_kv

#: `record(key bytes, key, accumulator, timestamp, window)`: what `PartialCombiner.emit` yields.
Record = Callable[[bytes, Any, Any, int, BoundedWindow], Any]

_MERGE_EVERY = 64  # a key's windows are merged when their number passes this (then doubles)


def keeps_latest(windowing: Windowing) -> bool:
    """Whether a partial accumulator keeps its latest input timestamp (else the earliest)."""
    return windowing.timestamp_combiner is TimestampCombiner.OUTPUT_AT_LATEST


class PartialCombiner:
    """Adds (kv, timestamp, windows) triples into one accumulator per key and window.

    `bound(window)`, when given, is the CombineFn for a window (a combine with side inputs, whose
    CombineFn is bound to each window's side inputs; only with non-merging windows)."""

    def __init__(self, label: str, combine_fn: CombineFn, windowing: Windowing,
                 bound: Optional[Callable[[BoundedWindow], CombineFn]] = None) -> None:
        self.label = label
        self.combine_fn = combine_fn
        windowfn = windowing.windowfn
        self.merging_fn: Optional[WindowFn] = windowfn if windowfn.is_merging() else None
        self.latest = keeps_latest(windowing)
        self.bound = bound
        self.fns: Dict[BoundedWindow, CombineFn] = {}
        self.table: Dict[bytes, Tuple[Any, Dict[BoundedWindow, list]]] = {}  # kb -> (key, {w: [acc, ts]})
        self.kb_of: Dict[Tuple[type, Any], bytes] = {}
        self.by_str: Dict[str, Dict[BoundedWindow, list]] = {}
        self.limits: Dict[int, int] = {}

    def _fn(self, window: BoundedWindow) -> CombineFn:
        if self.bound is None:
            return self.combine_fn
        fn = self.fns.get(window)
        if fn is None:
            fn = self.fns[window] = self.bound(window)
        return fn


    def add_all(self, triples: Iterable[Tuple[Any, int, Tuple[BoundedWindow, ...]]]) -> None:
        """Accumulates a batch of (kv, timestamp, windows)."""
        if self.bound is not None:
            self._add_all_bound(triples)
            return
        label, table, kb_of, limits = self.label, self.table, self.kb_of, self.limits
        create, add = self.combine_fn.create_accumulator, self.combine_fn.add_input
        merging_fn, latest = self.merging_fn, self.latest
        by_str = self.by_str
        for kv, ts, wins in triples:
            try:
                k, v = kv
            except (TypeError, ValueError):
                k, v = split_kv(label, kv)  # raises the error naming the step
            if type(k) is str:  # the common case: one lookup (str keys of equal value are equal)
                windows = by_str.get(k)
                if windows is None:
                    kb = grouping_key_bytes(label, k, kv)
                    windows = by_str[k] = table.setdefault(kb, (k, {}))[1]
            else:
                t = type(k)
                if t is int or t is bytes:
                    known = kb_of.get((t, k))
                    if known is None:
                        known = kb_of[(t, k)] = grouping_key_bytes(label, k, kv)
                    kb = known
                else:
                    kb = grouping_key_bytes(label, k, kv)
                entry = table.get(kb)
                if entry is None:
                    entry = table[kb] = (k, {})
                windows = entry[1]
            for w in wins:
                cell = windows.get(w)
                if cell is None:
                    windows[w] = [add(create(), v), ts]
                else:
                    cell[0] = add(cell[0], v)
                    if (ts > cell[1]) if latest else (ts < cell[1]):
                        cell[1] = ts
            if merging_fn is not None and len(windows) > limits.get(id(windows), _MERGE_EVERY):
                self._merge(windows)
                limits[id(windows)] = max(_MERGE_EVERY, 2 * len(windows))

    def _add_all_bound(self, triples: Iterable[Tuple[Any, int, Tuple[BoundedWindow, ...]]]) -> None:
        label, table, latest = self.label, self.table, self.latest
        for kv, ts, wins in triples:
            k, v, kb = key_of(label, kv)
            windows = table.setdefault(kb, (k, {}))[1]
            for w in wins:
                fn = self._fn(w)
                cell = windows.get(w)
                if cell is None:
                    windows[w] = [fn.add_input(fn.create_accumulator(), v), ts]
                else:
                    cell[0] = fn.add_input(cell[0], v)
                    if (ts > cell[1]) if latest else (ts < cell[1]):
                        cell[1] = ts

    def _merge(self, windows: Dict[BoundedWindow, list]) -> None:
        """Merges a key's windows as the WindowFn says, and their accumulators and timestamps."""
        assert self.merging_fn is not None
        fn, latest = self.combine_fn, self.latest
        for group, result in self.merging_fn._merge(list(windows)):
            cells = [windows.pop(w) for w in group if w in windows]
            if not cells:
                continue
            acc = cells[0][0] if len(cells) == 1 else fn.merge_accumulators([c[0] for c in cells])
            times = [c[1] for c in cells]
            windows[result] = [acc, max(times) if latest else min(times)]

    def emit(self, record: Record) -> Iterator[Any]:
        """Yields `record(key bytes, key, compacted accumulator, timestamp, window)` per group."""
        for kb, (k, windows) in self.table.items():
            if self.merging_fn is not None:
                self._merge(windows)
            for w, (a, ts) in windows.items():
                yield record(kb, k, self._fn(w).compact(a), ts, w)
        self.table = {}
        self.by_str = {}
        self.limits = {}

