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

import enum
import itertools
import sys
import types
from operator import itemgetter
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Tuple

from headrace.model.combine import CombineFn
from headrace.model.window import BoundedWindow, IntervalWindow, Sessions, WindowFn
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.runners.kit.grouping import grouping_key_bytes, key_of, split_kv
from headrace.transforms.core import CombinePerKey

#: `record(key bytes, key, accumulator, timestamp, window)`: what `PartialCombiner.emit` yields.
Record = Callable[[bytes, Any, Any, int, BoundedWindow], Any]

_MERGE_EVERY = 64  # a key's windows are merged when their number passes this (then doubles)
#: The cells (an accumulator per key and window, or an input a key holds for its next sessions
#: sweep) a `PartialCombiner` holds before `full` compacts it: about 100 MB at the 250-330 bytes
#: a cell of small accumulators measured (benchmarks/README.md, "Cost that grows linearly").
MAX_CELLS = 400_000
#: The bytes a `PartialCombiner`'s table may take (`estimated_bytes`): accumulators that grow
#: (a list of inputs, a large `Top`) bound it before `MAX_CELLS` does.
MAX_BYTES = 128 << 20
_SAMPLE_ENTRIES = 16      # keys' entries measured per sample of the table's size
_SAMPLE_OBJECTS = 20_000  # objects visited at most per sample (the rest extrapolated)
_SLOT_BYTES = 120         # a key's slots in the table's dictionaries, beyond its entry
_start = itemgetter(0)


class Lift(enum.Enum):
    """How a CombinePerKey is lifted (`lift`)."""

    ALL = "all"       # every input combined before the grouping
    SPLIT = "split"   # only the inputs not behind the grouping's input watermark; others as elements


def lift(node: Any, micro_batches: bool) -> Optional[Lift]:
    """Whether and how the grouping `node` (an AppliedPTransform) is lifted: its inputs combined
    into partial accumulators per key and window before the grouping, which the per-key core
    then takes as such; None for a grouping that is not lifted. Never a GroupByKey, never with
    retractions coming in.

    * The whole input under a perfect watermark (`micro_batches` False; the batch runner): a
      CombinePerKey with a watermark-only trigger, whose panes then do not depend on how many
      inputs came or in what order, is lifted whole (`Lift.ALL`); with side inputs, only over
      windows that do not merge (each input's window is then final, and its side inputs known).
    * Micro-batches (the streaming runner): a CombinePerKey without side inputs or a late-data
      output: each partition of the level before it sends one partial accumulator per key and
      window of the batch (with how many inputs it holds), which the core takes in one call; only
      where that gives the panes of the elements bundle by bundle, always with output timestamps
      at the end of the window (a hold then does not depend on which inputs were behind the
      output watermark), `_micro_batch_lift`.
    """
    t = node.transform
    src = node.inputs[0]
    if not isinstance(t, CombinePerKey) or src.may_contain_retractions:
        return None
    windowing = src.windowing
    if not micro_batches:
        if not windowing.trigger.watermark_only:
            return None
        if node.side_inputs and windowing.windowfn.is_merging():
            return None
        return Lift.ALL
    late_tag = getattr(t, "late_tag", None)
    if node.side_inputs or (late_tag and node.outputs.get(late_tag) is not None):
        return None
    return _micro_batch_lift(windowing)


def _micro_batch_lift(windowing: Windowing) -> Optional[Lift]:
    """How a lifted CombinePerKey with this input windowing is fed in micro-batches:

    * `Lift.ALL`: a watermark-only trigger over windows that do not merge: every input is
      combined (no pane depends on how many inputs came, and the local runner hands such a
      grouping each key's buffered elements at once);
    * `Lift.SPLIT`: `Sessions` or windows that do not merge, with a trigger that no input makes
      ready before the end of its window (`TriggerFn.blind_before_end_of_window`: the watermark,
      and processing-time delays that start at an element's arrival; the late firings may count
      elements). Only the inputs at or after the grouping's input watermark before the batch are
      combined; such an input's window ends after that watermark and can only join windows that
      do (a session too late to fire ends before it), so no pane fires on their arrival (in a
      batch with input no key waits for processing time already due) and their order does not
      matter. The inputs behind the watermark go to the core as elements, bundle by bundle,
      after the partials.
    """
    if windowing.timestamp_combiner is not TimestampCombiner.OUTPUT_AT_EOW:
        return None
    windowfn = windowing.windowfn
    merging = windowfn.is_merging()
    if merging and type(windowfn) is not Sessions:
        return None  # a custom merge need not be the same in any order of merging
    if windowing.trigger.watermark_only and not merging:
        return Lift.ALL
    return Lift.SPLIT if windowing.trigger.blind_before_end_of_window else None


def keeps_latest(windowing: Windowing) -> bool:
    """Whether a partial accumulator keeps its latest input timestamp (else the earliest)."""
    return windowing.timestamp_combiner is TimestampCombiner.OUTPUT_AT_LATEST


class PartialCombiner:
    """Adds (kv, timestamp, windows) triples into one accumulator per key and window.

    `bound(window)`, when given, is the CombineFn for a window (a combine with side inputs, whose
    CombineFn is bound to each window's side inputs; only with non-merging windows).

    With `Sessions` (whose merge joins overlapping intervals, a result independent of the order
    of merging), a key's inputs are kept as (start, end, timestamp, value) until there are many
    of them (more than its sessions), then swept in order of window start into merged
    sessions, each one's inputs added with `add_input` (no window object, dictionary entry or
    `merge_accumulators` call per element); accumulated sessions take part in later sweeps and
    are merged with `merge_accumulators` only when a session spans two sweeps.
    """

    def __init__(self, label: str, combine_fn: CombineFn, windowing: Windowing,
                 bound: Optional[Callable[[BoundedWindow], CombineFn]] = None,
                 max_cells: int = MAX_CELLS, max_bytes: int = MAX_BYTES) -> None:
        self.label = label
        self.max_cells = max_cells
        self.max_bytes = max_bytes
        #: cells held: accumulators per key and window, and inputs waiting for a sessions sweep
        self.cells = 0
        # the table's size: `full`'s calls since it was empty, the last two samples (calls,
        # bytes), the call at which to sample again
        self._checks = 0
        self._samples: List[Tuple[int, float]] = []
        self._next_sample = 1
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
        self.sessions = type(windowfn) is Sessions and bound is None
        #: with `sessions`: key bytes -> [key, pending inputs, merged sessions], both lists of
        #: (window start, window end, timestamp, value or accumulator, whether an accumulator,
        #: inputs it holds)
        self.swept: Dict[bytes, list] = {}
        self.swept_by_str: Dict[str, list] = {}

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
        if self.sessions:
            self._add_all_sessions(triples)
            return
        label, table, kb_of, limits = self.label, self.table, self.kb_of, self.limits
        create, add = self.combine_fn.create_accumulator, self.combine_fn.add_input
        merging_fn, latest = self.merging_fn, self.latest
        by_str = self.by_str
        new = 0
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
                    windows[w] = [add(create(), v), ts, 1]
                    new += 1
                else:
                    cell[0] = add(cell[0], v)
                    if (ts > cell[1]) if latest else (ts < cell[1]):
                        cell[1] = ts
                    cell[2] += 1
            if merging_fn is not None and len(windows) > limits.get(id(windows), _MERGE_EVERY):
                self._merge(windows)
                limits[id(windows)] = max(_MERGE_EVERY, 2 * len(windows))
        self.cells += new

    def _entry(self, kv: Any) -> Tuple[Any, list]:
        """(value, the key's swept entry) of one input."""
        label = self.label
        try:
            k, v = kv
        except (TypeError, ValueError):
            k, v = split_kv(label, kv)  # raises the error naming the step
        if type(k) is str:
            entry = self.swept_by_str.get(k)
            if entry is None:
                kb = grouping_key_bytes(label, k, kv)
                entry = self.swept_by_str[k] = self.swept.setdefault(kb, [k, [], []])
            return v, entry
        kb = grouping_key_bytes(label, k, kv)
        entry = self.swept.get(kb)
        if entry is None:
            entry = self.swept[kb] = [k, [], []]
        return v, entry

    def _add_all_sessions(self, triples: Iterable[Tuple[Any, int, Tuple[BoundedWindow, ...]]]) -> None:
        self.add_spans((kv, w.start_us, w.end_us, ts)  # type: ignore[attr-defined]
                       for kv, ts, wins in triples for w in wins)

    def add_proto_sessions(self, values: Iterable[Any], ts: Iterable[int], gap_us: int) -> None:
        """Accumulates a batch of (kv, timestamp), each in its proto-session [timestamp,
        timestamp + gap) (a `columnar.ProtoSessions` column, read without its windows)."""
        self.add_spans((kv, t, t + gap_us, t) for kv, t in zip(values, ts))

    def add_spans(self, spans: Iterable[Tuple[Any, int, int, int]]) -> None:
        """Accumulates (kv, window start, window end, timestamp) of a merging (Sessions) combine."""
        entry_of = self._entry
        new = 0
        for kv, start, end, ts in spans:
            v, entry = entry_of(kv)
            pending = entry[1]
            pending.append((start, end, ts, v, False, 1))
            new += 1
            if len(pending) > _MERGE_EVERY and len(pending) > len(entry[2]):
                self._sweep(entry)
        self.cells += new

    def _sweep(self, entry: list) -> None:
        """Merges a key's pending inputs and its sessions into sessions (see the class doc)."""
        fn, latest = self.combine_fn, self.latest
        create, add, merge = fn.create_accumulator, fn.add_input, fn.merge_accumulators
        items: List[tuple] = entry[1]
        items += entry[2]
        held = len(items)
        items.sort(key=_start)
        out: List[tuple] = []
        cur_s = cur_e = cur_ts = cur_n = 0
        accs: List[Any] = []
        values: List[Any] = []
        for s, e, ts, x, is_acc, n in items:
            if s < cur_e and (accs or values):
                if e > cur_e:
                    cur_e = e
                if (ts > cur_ts) if latest else (ts < cur_ts):
                    cur_ts = ts
                cur_n += n
            else:
                if accs or values:
                    out.append((cur_s, cur_e, cur_ts, _combined(create, add, merge, accs, values),
                                True, cur_n))
                    accs, values = [], []
                cur_s, cur_e, cur_ts, cur_n = s, e, ts, n
            if is_acc:
                accs.append(x)
            else:
                values.append(x)
        if accs or values:
            out.append((cur_s, cur_e, cur_ts, _combined(create, add, merge, accs, values), True,
                        cur_n))
        entry[1] = []
        entry[2] = out
        self.cells += len(out) - held

    def _add_all_bound(self, triples: Iterable[Tuple[Any, int, Tuple[BoundedWindow, ...]]]) -> None:
        label, table, latest = self.label, self.table, self.latest
        for kv, ts, wins in triples:
            k, v, kb = key_of(label, kv)
            windows = table.setdefault(kb, (k, {}))[1]
            for w in wins:
                fn = self._fn(w)
                cell = windows.get(w)
                if cell is None:
                    windows[w] = [fn.add_input(fn.create_accumulator(), v), ts, 1]
                    self.cells += 1
                else:
                    cell[0] = fn.add_input(cell[0], v)
                    if (ts > cell[1]) if latest else (ts < cell[1]):
                        cell[1] = ts
                    cell[2] += 1

    def _merge(self, windows: Dict[BoundedWindow, list]) -> None:
        """Merges a key's windows as the WindowFn says, and their accumulators and timestamps."""
        assert self.merging_fn is not None
        fn, latest = self.combine_fn, self.latest
        held = len(windows)
        for group, result in self.merging_fn._merge(list(windows)):
            cells = [windows.pop(w) for w in group if w in windows]
            if not cells:
                continue
            acc = cells[0][0] if len(cells) == 1 else fn.merge_accumulators([c[0] for c in cells])
            times = [c[1] for c in cells]
            windows[result] = [acc, max(times) if latest else min(times), sum(c[2] for c in cells)]
        self.cells += len(windows) - held

    def full(self) -> bool:
        """Whether the table holds more than `max_cells` cells or `max_bytes` bytes
        (`estimated_bytes`) even once compacted (each key's inputs swept into sessions, its
        merging windows merged), keeping half of each free: the caller then emits it (`emit`),
        which empties it. A key's partials from several emits are merged on the reduce side as
        those of several workers are, so a worker's memory is bounded whatever the size of its
        partition (Spark's own map-side combines spill past a memory bound likewise). Called once
        per batch of inputs added."""
        self._checks += 1
        if self._checks >= self._next_sample and self.cells:
            self._sample()
        if self.cells <= self.max_cells and self.estimated_bytes() <= self.max_bytes:
            return False
        if self.sessions:
            for entry in self.swept.values():
                if entry[1]:
                    self._sweep(entry)
        elif self.merging_fn is not None:
            for _, windows in self.table.values():
                self._merge(windows)
        compacted = self.sessions or self.merging_fn is not None
        if compacted and self.estimated_bytes() > self.max_bytes:
            self._sample()  # measured again (else the table is as it was measured)
        return self.cells > self.max_cells // 2 or self.estimated_bytes() > self.max_bytes // 2

    def estimated_bytes(self) -> float:
        """The table's bytes, as Spark's `SizeTracker` estimates a map's: sampled at calls of
        `full` growing geometrically (the keys' entries measured deep, `deep_size`, a few of
        them when there are many), extrapolated between samples at the rate of the last two."""
        if not self._samples:
            return 0.0
        at, size = self._samples[-1]
        if len(self._samples) < 2:
            return size
        before, earlier = self._samples[0]
        return size + max(0.0, (size - earlier) / (at - before)) * (self._checks - at)

    def _sample(self) -> None:
        """Measures the table's bytes now (`estimated_bytes`) and sets when to do it again."""
        entries: Dict[bytes, Any] = self.swept if self.sessions else self.table  # type: ignore[assignment]
        seen: set = set()
        size = visited = sampled = 0
        for kb, entry in itertools.islice(entries.items(), _SAMPLE_ENTRIES):
            n, objects = deep_size(entry, seen, _SAMPLE_OBJECTS - visited)
            size += n + sys.getsizeof(kb) + _SLOT_BYTES
            visited += objects
            sampled += 1
            if visited >= _SAMPLE_OBJECTS:
                break
        total = size * len(entries) / sampled if sampled else 0.0
        self._samples = [s for s in self._samples[-1:] if s[0] < self._checks] + [(self._checks, total)]
        self._next_sample = self._checks + (self._checks + 1) // 2

    def emit(self, record: Record) -> Iterator[Any]:
        """Yields `record(key bytes, key, compacted accumulator, timestamp, window)` per group."""
        for kb, k, cells in self.emit_counted():
            for w, acc, ts, _ in cells:
                yield record(kb, k, acc, ts, w)

    def emit_counted(self) -> Iterator[Tuple[bytes, Any, List[Tuple[BoundedWindow, Any, int, int]]]]:
        """Yields (key bytes, key, [(window, compacted accumulator, timestamp, inputs added)])
        per key."""
        if self.sessions:
            compact = self.combine_fn.compact
            for kb, entry in self.swept.items():
                if entry[1]:
                    self._sweep(entry)
                yield kb, entry[0], [(IntervalWindow._of(s, e), compact(acc), ts, n)
                                     for s, e, ts, acc, _, n in entry[2]]
            self.swept = {}
            self.swept_by_str = {}
            self.kb_of = {}
            self._emptied()
            return
        for kb, (k, windows) in self.table.items():
            if self.merging_fn is not None:
                self._merge(windows)
            yield kb, k, [(w, self._fn(w).compact(c[0]), c[1], c[2]) for w, c in windows.items()]
        self.table = {}
        self.by_str = {}
        self.limits = {}
        self.kb_of = {}
        self._emptied()

    def _emptied(self) -> None:
        self.cells = 0
        self._checks = 0
        self._samples = []
        self._next_sample = 1


def _combined(create: Callable[[], Any], add: Callable[[Any, Any], Any],
              merge: Callable[[Iterable[Any]], Any], accs: List[Any], values: List[Any]) -> Any:
    """One accumulator of earlier accumulators and new inputs."""
    acc = accs[0] if len(accs) == 1 else (merge(accs) if accs else create())
    for v in values:
        acc = add(acc, v)
    return acc


_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
           types.CodeType)
_LEAVES = (str, bytes, int, float, bool, type(None))
_BUILTIN = (list, tuple, set, frozenset, dict)


def deep_size(obj: Any, seen: set, max_objects: int) -> Tuple[int, int]:
    """(bytes, objects visited): `sys.getsizeof` of `obj` and of what it holds (containers'
    items, instances' attributes; classes, modules and functions not followed), each object
    once (`seen`); past `max_objects` the rest is counted at the mean size of those visited
    after `obj` itself."""
    stack = [obj]
    size = visited = root = 0
    while stack and visited < max_objects:
        o = stack.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        visited += 1
        n = sys.getsizeof(o, 64)  # 64: an object that cannot tell its size
        size += n
        if visited == 1:
            root = n
        t = type(o)
        if t in _LEAVES or issubclass(t, _OPAQUE):
            continue
        try:  # a user's object: what it holds, if it says so plainly
            if issubclass(t, dict):
                stack.extend(o.keys())
                stack.extend(o.values())
            elif issubclass(t, (list, tuple, set, frozenset)):
                stack.extend(o)
            if t in _BUILTIN:
                continue
            attrs = getattr(o, "__dict__", None)
            if attrs is not None:
                stack.append(attrs)
            slots = getattr(t, "__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                value = getattr(o, slot, None)
                if value is not None:
                    stack.append(value)
        except Exception:  # e.g. a proxy whose attribute lookup fails: counted alone
            continue
    if stack and visited > 1:
        size += len(stack) * (size - root) // (visited - 1)
    return size, visited
