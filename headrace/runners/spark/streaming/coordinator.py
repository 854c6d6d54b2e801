"""The streaming runner's watermarks and micro-batch schedule: Dataflow's, computed by headrace.

Spark gives a streaming query one global watermark and no per-key holds, so the streaming
runner does not use Spark's watermark for semantics. This module, pure Python and run on the
driver, owns every watermark instead, as the Dataflow Model paper (VLDB 2015) defines them
(the local runner's executor does the same in one process):

* each source reports its own watermark, a function of its position (a TestStream's script
  position, a bounded source's "emitted yet?");
* a grouping's input watermark is the minimum over its input PCollections, and its output
  watermark is that, held back by the holds of its keys (`ReduceFnRunner.output_hold_us`),
  never moving back; element-wise steps and Flatten pass watermarks on;
* the holds are kept as a multiset per grouping (`Counter` hold -> number of keys), updated
  from the deltas the stateful operators report after each micro-batch (a key reports its
  hold when it changes), so the minimum is known without visiting the keys.

Every micro-batch's offset (`offsets.Offset`, in Spark's offset log) carries the watermarks
the batch must use (`input_watermarks`, the groupings' input watermarks at the batch's new
source positions; the previous batch's are the watermarks its input is judged against), the
processing times, the Spark clock during the batch (`clock`) and the value stamped on its rows
(`next_clock`). A replayed batch reads its offset back from the log, so it sees exactly the
same values.

Scheduling follows the local runner's settle loop: after a batch, if a grouping's input
watermark would move, or a key's processing-time wakeup is due, the next batch is a *round*
(no new input; it delivers the new watermarks and fires timers); only when nothing would move
does a source advance (a TestStream by one step, as the local runner steps it: one event, or
events whose batching cannot change a pane, see `Coordinator._step_end`). So a script gives the
same panes as on the local runner. An unbounded source (`UnboundedSource`) advances to the
position it *reserved* when the previous batch was planned (what it had then, at most
`max_records` further): the reservation makes its next watermark known one batch ahead, for
the Spark clock below; new records thus wait one batch (two when the stream was idle), but the
first batch reads what the sources have (no key exists before it: no pane can change).

A splittable step's works (`splittable`) report their resume times as processing-time wakeups
and their watermark holds as holds. Due works make a batch run but not a round (the sources may
advance meanwhile: an unbounded-per-element read must not stop its input); on a TestStream's
virtual clock, once an island's sources are done, its processing time jumps to the next resume
time (the local runner's `idle_until`); the query is finished only when no work is left.

A grouping's output watermark stays at or below its input watermark of the previous batch
(holds of input arriving in a batch are reported after it), so a chain of groupings catches up
over one round per level.

The Spark clock: stateful operators wake keys with Spark event-time timers, which fire when
Spark's watermark passes them. The source stamps every row with `next_clock` (a column Spark
watermarks with zero delay), so in batch n+1 Spark's watermark is batch n's stamp. The stamp
is at least the largest watermark any grouping can see in batch n+1, without holds, with
every TestStream one step further and every unbounded source at its reservation (so a key
whose timer is due at its grouping's watermark is woken; the very first batch runs at Spark's
initial 0, before any key exists), and grows
by at least 1 every batch (so a timer at "this batch's clock + 1" means "wake me next batch").
It is only a wake-up clock: a woken key re-checks its timers against its grouping's own
watermark.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.runners.kit.plan import Kind
from headrace.runners.kit.sources import unbounded_available, unbounded_watermark
from headrace.runners.spark.streaming.offsets import Offset
from headrace.runners.spark.streaming.scripts import (
    HOLDING, SOURCES, ScriptChunks, Step,
)
from headrace.testing.test_stream import ElementEvent, ProcessingTimeEvent, WatermarkEvent

MIN = MIN_TIMESTAMP_MICROS
MAX = MAX_TIMESTAMP_MICROS

# The Spark clock is in milliseconds, inside the range of Spark's TimestampType (years 1 to
# 9999), which headrace's range (int64 microseconds) exceeds: times are shifted and clamped.
# Spark's watermark starts at 0, which stands for MIN here.
_CLOCK_SHIFT_MS = 100_000_000_000_000     # ~3170 years: event times from 1200 BC map above 0
CLOCK_MAX_MS = 250_000_000_000_000        # +infinity; below 9999-12-31 (253,402,300,800,000 ms)
_CLOCK_LIMIT_MS = 253_000_000_000_000     # the clock grows past CLOCK_MAX_MS by 1 a batch up to here


def to_clock(micros: int) -> int:
    """The Spark clock value (ms) at or after event time `micros`: `t <= w` implies
    `to_clock(t) <= to_clock(w)`, so a timer due at a watermark is due at its clock."""
    if micros <= MIN:
        return 0
    if micros >= MAX:
        return CLOCK_MAX_MS
    ms = -((-micros) // 1000) + _CLOCK_SHIFT_MS  # ceiling
    return min(max(ms, 0), CLOCK_MAX_MS)


class Node(NamedTuple):
    """One planned unit as the watermark graph sees it."""

    kind: Kind                  # the unit's kind (a stateful ParDo: GROUPING), or SIDE_STEP
    ref: int                    # a source's or a grouping's index (-1 for the others)
    inputs: Tuple[int, ...]     # input PCollection ids
    outputs: Tuple[int, ...]    # output PCollection ids (a TestStream: in the order of `tags`)
    tags: Tuple[Optional[str], ...] = ()   # a TestStream's output tags
    sides: Tuple[int, ...] = ()             # a side step's side-input PCollection ids


class BatchState:
    """What the driver knows after a micro-batch: the holds and processing-time wakeups of
    every grouping's keys (multisets), and the committed metrics (picklable)."""

    def __init__(self, n_groupings: int) -> None:
        self.n = -1
        self.holds: List[Counter] = [Counter() for _ in range(n_groupings)]
        self.ptimes: List[Counter] = [Counter() for _ in range(n_groupings)]
        self.metrics: Any = None

    def apply(self, kind: str, g: int, old: int, new: int) -> None:
        """Applies one key's report: its hold ("hold") or wakeup ("pt") moved from old to new
        (MAX: none)."""
        bag = self.holds[g] if kind == "hold" else self.ptimes[g]
        if old != MAX:
            left = bag[old] - 1
            if left > 0:
                bag[old] = left
            else:
                del bag[old]
        if new != MAX:
            bag[new] += 1

    def min_hold(self, g: int) -> int:
        """The earliest hold of grouping g's keys (MAX: none)."""
        bag = self.holds[g]
        return min(bag) if bag else MAX

    def min_ptime(self, g: int) -> int:
        """The earliest processing-time wakeup of grouping g's keys (MAX: none)."""
        bag = self.ptimes[g]
        return min(bag) if bag else MAX


class Coordinator:
    """Computes the watermarks and the next offset of a streaming pipeline (see the module doc).

    `nodes` are the planned units in dependency order; `scripts[i]` is the event list of
    source i when it is a TestStream (None for the others); `unbounded[i]` is source i's
    UnboundedSource, read at most `max_records` records a batch (through `kit.sources`, whose
    errors name the step: `labels[i]`); `virtual_time` is True when
    processing time is a TestStream's virtual clock (else the wall clock at planning);
    `merge_elements` is True when no grouping's trigger waits for processing time, so a batch
    may take an element event together with the watermark event after it (`_step_end`);
    `chunking` is (plain groupings, end-only groupings): with `chunk_events` above 1 it lets
    islands take up to that many events of their TestStream in one batch
    (`scripts.ScriptChunks.find`), and an end-only grouping's watermark moving short of
    +infinity never makes a round (`_busy`)."""

    def __init__(self, nodes: Sequence[Node], scripts: Sequence[Optional[List[Any]]],
                 n_groupings: int, merge_elements: Union[bool, Sequence[bool]] = False,
                 unbounded: Optional[Dict[int, Any]] = None, max_records: int = 100_000,
                 labels: Optional[Dict[int, str]] = None,
                 chunking: Optional[Tuple[Set[int], Set[int]]] = None,
                 chunk_events: int = 1000) -> None:
        self.nodes = tuple(nodes)
        self.unbounded = dict(unbounded or {})
        self.labels = dict(labels or {})   # source index -> step label (errors name the step)
        self.max_records = max(1, int(max_records))
        self.scripts = list(scripts)
        self.n_groupings = n_groupings
        self.virtual_time = any(s is not None for s in scripts)
        self._streams = [i for i, s in enumerate(scripts) if s is not None]
        self._tags = {node.ref: node.tags for node in self.nodes if node.kind is Kind.TEST_STREAM}
        self._side_steps = [node.ref for node in self.nodes if node.kind is Kind.SIDE_STEP]
        self._splittable = [node.ref for node in self.nodes if node.kind is Kind.SPLITTABLE]
        pt_free = ([bool(merge_elements)] * n_groupings if isinstance(merge_elements, bool)
                   else [bool(b) for b in merge_elements])
        self._find_islands()
        self._merge = [all(pt_free[g] for g in gs) for gs in self._island_groupings]
        self.merge_elements = all(self._merge)
        # the islands that take their TestStream a chunk of steps per batch (`scripts`)
        self.chunks = ScriptChunks(self.nodes, self.scripts, self.source_island,
                                   self.n_islands, set(self.unbounded), chunk_events)
        # groupings that fire only at the end of their input: a move of their input watermark
        # short of +infinity needs no round (`_busy`)
        self._end_only: Set[int] = set(chunking[1]) if chunking is not None else set()
        if chunking is not None and chunk_events > 1:
            self.chunks.find(*chunking)

    def chunked(self) -> Set[int]:
        """The groupings that take a TestStream's steps a chunk at a time."""
        return self.chunks.chunked()

    def chunk_steps(self, start: Offset, end: Offset) -> Dict[int, List[Step]]:
        """The steps of the batch from `start` to `end` for the groupings that take a chunk of
        them (`scripts.ScriptChunks.steps`)."""
        return self.chunks.steps(start, end)

    def _find_islands(self) -> None:
        """Splits the pipeline into islands: parts that share no PCollection (connected
        components). Islands are scheduled independently, each with its own processing time,
        so independent pipelines in one query give what each gives alone."""
        parent: Dict[int, int] = {}

        def find(x: int) -> int:
            while parent.setdefault(x, x) != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for node in self.nodes:
            ids = list(node.inputs) + list(node.outputs) + list(node.sides)
            for a in ids[1:]:
                ra, rb = find(ids[0]), find(a)
                if ra != rb:
                    parent[rb] = ra
        label: Dict[int, int] = {}
        source_island = [0] * len(self.scripts)
        g_island = [0] * self.n_groupings
        for node in self.nodes:
            ids = list(node.outputs) + list(node.inputs)
            if not ids:
                continue
            k = label.setdefault(find(ids[0]), len(label))
            if node.kind in SOURCES:
                source_island[node.ref] = k
            elif node.kind in HOLDING:
                g_island[node.ref] = k
        self.n_islands = max(1, len(label))
        self.source_island = source_island   # each source's island, by source index
        self._g_island = g_island
        self._island_sources = [[i for i in range(len(self.scripts)) if source_island[i] == k]
                                for k in range(self.n_islands)]
        self._island_groupings = [[g for g in range(self.n_groupings) if g_island[g] == k]
                                  for k in range(self.n_islands)]
        self._island_streams = [[i for i in self._streams if source_island[i] == k]
                                for k in range(self.n_islands)]

    # ---- offsets ----------------------------------------------------------------------

    def initial_offset(self) -> Offset:
        """The offset before the first batch (nothing read, every watermark at the start)."""
        g = self.n_groupings
        pos = [self.unbounded[i].initial_position() if i in self.unbounded else 0
               for i in range(len(self.scripts))]
        return Offset(batch=-1, positions=pos, reserved=list(pos),
                      island_processing_times=[0] * self.n_islands,
                      round_robin=[0] * self.n_islands, processing_times=[0] * g,
                      input_watermarks=[MIN] * g, output_watermarks=[MIN] * g,
                      output_watermarks_before=[MIN] * g, clock=0, next_clock=0,
                      side_input_watermarks={node.ref: [MIN] * len(node.sides)
                                             for node in self.nodes if node.sides})

    def finished(self, offset: Offset, state: Optional[BatchState] = None) -> bool:
        """True when every source has ended and every grouping's input watermark is at +infinity
        after the batch that ended at `offset` (nothing is left to do), and (with the `state`
        after it) no splittable step has works left."""
        return (all(w == MAX for w in offset.input_watermarks)
                and all(w == MAX for w in self.source_watermarks(offset.positions).values())
                and (state is None or all(state.min_hold(g) == MAX and state.min_ptime(g) == MAX
                                          for g in self._splittable)))

    def works_due(self, state: BatchState, pts: List[int]) -> List[bool]:
        """Per island, whether a splittable step's works are due at its processing time: a
        batch must run, though it need not be a round (its sources may advance meanwhile)."""
        due = [False] * self.n_islands
        for g in self._splittable:
            if state.min_ptime(g) <= pts[self._g_island[g]]:
                due[self._g_island[g]] = True
        return due

    def next_resume(self, state: BatchState) -> int:
        """The earliest processing time at which a splittable step's works resume (MAX: none)."""
        return min([MAX] + [state.min_ptime(g) for g in self._splittable])

    def _jump(self, k: int, pts: List[int], state: BatchState) -> bool:
        """On a TestStream's virtual clock, once island k's sources are done: lets its processing
        time jump to the next resume time of its splittable steps' works (as the local runner's
        `idle_until` does); False if it has none."""
        if not self.virtual_time:
            return False
        nxt = min([MAX] + [state.min_ptime(g) for g in self._splittable if self._g_island[g] == k])
        if pts[k] < nxt < MAX:
            pts[k] = nxt
            return True
        return False

    def next_offset(self, start: Offset, state: BatchState, wall_us: int) -> Optional[Offset]:
        """The end offset of the next batch after the batch that ended at `start` (whose
        reports made `state`), or None when there is nothing to do (the stream is idle, or
        finished).

        The batch's groupings use watermarks `input_watermarks` (computed at the new source
        positions with the holds after the previous batch); its elements were read while the
        watermarks were the previous batch's, and are judged against those."""
        pos = list(start.positions)
        # the first batch reads what the unbounded sources have now (module doc)
        reserved = self._reserve(pos, wall_us) if start.batch < 0 else list(start.reserved)
        prev_in, prev_out = start.input_watermarks, start.output_watermarks
        in_wm, out_wm = self.watermarks(pos, state, prev_out, prev_in)
        sides = self.side_watermarks(pos, state, prev_out, prev_in)
        pts = [p if self.virtual_time else max(p, wall_us) for p in start.island_processing_times]
        rrs = list(start.round_robin)
        busy = self._busy(start, state, in_wm, sides, pts)
        moved = False
        due = self.works_due(state, pts)
        for k in range(self.n_islands):
            if not busy[k] and self._advance(k, pos, pts, rrs, state, reserved):
                moved = True
            elif not busy[k] and not due[k] and self._jump(k, pts, state):
                due[k] = True
        if moved:
            in_wm, out_wm = self.watermarks(pos, state, prev_out, prev_in)
            sides = self.side_watermarks(pos, state, prev_out, prev_in)
        elif not any(busy) and not any(due) and self._reserve(pos, wall_us) == reserved:
            # idle, unless an unbounded source has new records: a batch without input then
            # reserves them for the next one
            return None
        nxt = self._reserve(pos, wall_us)
        clock = start.next_clock
        return Offset(batch=start.batch + 1, positions=pos, reserved=nxt,
                      island_processing_times=pts, round_robin=rrs,
                      processing_times=[pts[self._g_island[g]] for g in range(self.n_groupings)],
                      input_watermarks=in_wm, output_watermarks=out_wm,
                      output_watermarks_before=list(prev_out), clock=clock,
                      next_clock=min(max(to_clock(self._bound(nxt, out_wm)), clock + 1),
                                     _CLOCK_LIMIT_MS),
                      side_input_watermarks=sides)

    def _busy(self, start: Offset, state: BatchState, in_wm: List[int],
              sides: Dict[int, List[int]], pts: List[int]) -> List[bool]:
        """Per island, whether the batch after `start` must be a round (no new input): its
        watermarks would move, or its keys are due at its processing time, or its side step
        released what waited for its output watermark (one batch after it moved: the next level
        judges lateness against the watermark before the batch)."""
        if start.batch < 0:   # no key, held element or timer yet: no pane can change
            return [False] * self.n_islands
        # a timer due at the last batch's watermarks that Spark's clock did not reach yet (only
        # keys that existed before that batch have such timers: none before batch 0)
        lagging = (start.batch > 0
                   and to_clock(max(start.input_watermarks, default=MIN)) > start.clock)
        busy = [lagging] * self.n_islands
        before = start.output_watermarks_before
        for g in range(self.n_groupings):
            k = self._g_island[g]
            due = state.min_ptime(g) <= pts[k] and g not in self._splittable   # `works_due`
            # a grouping that fires only at the end of its input (global window, a trigger only
            # its end makes ready) changes nothing when its watermark moves short of the end
            moved = (in_wm[g] != start.input_watermarks[g]
                     and (in_wm[g] == MAX or g not in self._end_only))
            if (moved or due
                    or (g in self._side_steps and start.output_watermarks[g] != before[g])):
                busy[k] = True
        for ref, ws in sides.items():
            if ws != start.side_input_watermarks.get(ref):
                busy[self._g_island[ref]] = True
        return busy

    def _reserve(self, pos: List[Any], wall_us: int) -> List[Any]:
        """The positions the next advance of the unbounded sources reads up to: what they have
        at `wall_us`. Chosen one batch ahead, so that the Spark clock of the batch before it
        already covers the watermarks they reach (see the module doc)."""
        return [unbounded_available(self.labels.get(i, "Read"), self.unbounded[i], p, wall_us,
                                    self.max_records) if i in self.unbounded
                else p for i, p in enumerate(pos)]

    def _bound(self, pos: List[Any], out_wm: List[int]) -> int:
        """The largest watermark a grouping can see in the batch after the one ending at `pos`
        (unbounded sources: at their reserved positions): without holds, and with every source
        one step further (a TestStream's script is known, so the watermark of its next step is
        woken for in time)."""
        ahead = [p if i in self.unbounded
                 else self._next_end(i, p, 0, None)[0] if s is not None else max(p, 1)
                 for i, (p, s) in enumerate(zip(pos, self.scripts))]
        return max(self.watermarks(ahead, None, out_wm)[0], default=MIN)

    def _next_end(self, i: int, p: int, pt: int, state: Optional[BatchState]) -> Tuple[int, int]:
        """(position, processing time) after the next advance of TestStream source i at position
        `p`: a chunk of steps (`scripts.ScriptChunks`), else one step (`_step_end`)."""
        chunk = self.chunks.end(i, p, pt)
        return chunk if chunk is not None else self._step_end(i, p, pt, state)

    def _step_end(self, i: int, p: int, pt: int, state: Optional[BatchState]) -> Tuple[int, int]:
        """(position, processing time) after the next step of TestStream source i at position `p`.

        A step is one event, as the local runner performs them, or several events that give the
        same result in one batch: advances of processing time that wake no key (with `state`
        None: assumed to wake none), then, when no trigger of the pipeline waits for processing
        time (`merge_elements`), an element event and the watermark event after it (the batch
        processes its elements at the old watermark, then moves it, as two settle passes do).
        The final step (every output to +infinity) joins a step after which it changes nothing."""
        script = self.scripts[i]
        assert script is not None
        island = self._island_groupings[self.source_island[i]]
        merge = self._merge[self.source_island[i]]
        n = len(script)
        q = p
        while q < n and isinstance(script[q], ProcessingTimeEvent):
            pt += script[q].advance_by.micros
            q += 1
            if state is not None and any(state.min_ptime(g) <= pt for g in island):
                return q, pt  # it fires timers: nothing else in this batch
        if q < n and isinstance(script[q], ElementEvent):
            q += 1
            if merge and q < n and isinstance(script[q], WatermarkEvent):
                q += 1
        elif q < n and isinstance(script[q], WatermarkEvent):
            q += 1
        elif q == n:
            q += 1  # the final step
        if q == n and all(self.chunks.watermark(i, tag, q) == MAX for tag in self._tags[i]):
            q += 1
        return q, pt

    def _advance(self, k: int, pos: List[Any], pts: List[int], rrs: List[int],
                 state: Optional[BatchState], reserved: List[Any]) -> bool:
        """Moves island k's sources on by one step (in `pos`, and its processing time in `pts`
        and round robin in `rrs`): its bounded sources emit everything (first batch), else its
        unbounded sources read up to their reserved positions, else its next TestStream
        (round robin) performs one step (`_step_end`); False if none can."""
        moved = False
        for i in self._island_sources[k]:
            if self.scripts[i] is None and i not in self.unbounded and pos[i] == 0:
                pos[i] = 1
                moved = True
        if moved:
            return True
        for i in self._island_sources[k]:
            if i in self.unbounded and reserved[i] != pos[i]:
                pos[i] = reserved[i]
                moved = True
        if moved:
            return True
        streams = self._island_streams[k]
        n = len(streams)
        for j in range(n):
            i = streams[(rrs[k] + j) % n]
            script = self.scripts[i]
            assert script is not None
            if pos[i] <= len(script):  # len(script): the final "every output to +infinity"
                pos[i], pts[k] = self._next_end(i, pos[i], pts[k], state)
                rrs[k] = (rrs[k] + j + 1) % n
                return True
        return False

    # ---- watermarks ---------------------------------------------------------------------

    def source_watermarks(self, pos: Sequence[int]) -> Dict[int, int]:
        """The watermark of every source output PCollection at source positions `pos`."""
        wms: Dict[int, int] = {}
        for node in self.nodes:
            if node.kind is Kind.SOURCE:
                for pc in node.outputs:
                    wms[pc] = MAX if pos[node.ref] else MIN
            elif node.kind is Kind.UNBOUNDED:
                wm = unbounded_watermark(self.labels.get(node.ref, "Read"), self.unbounded[node.ref],
                                         pos[node.ref])
                for pc in node.outputs:
                    wms[pc] = wm
            elif node.kind is Kind.TEST_STREAM:
                for pc, tag in zip(node.outputs, node.tags):
                    wms[pc] = self.chunks.watermark(node.ref, tag, pos[node.ref])
        return wms

    def watermarks(self, pos: Sequence[Any], state: Optional[BatchState], prev_out: Sequence[int],
                   prev_in: Optional[Sequence[int]] = None) -> Tuple[List[int], List[int]]:
        """(input watermark, output watermark) of every grouping, at source positions `pos`
        with the holds in `state` (None: without holds); output watermarks never go below
        `prev_out`.

        With `prev_in` (the groupings' input watermarks in the previous batch), an output
        watermark is also kept at or below its grouping's previous input watermark: input that
        reaches a grouping in the coming batch is judged against that watermark, and a hold it
        sets (reported only after the batch) is never below it or the key's known holds. The
        output watermark then catches up in the next batch (a round)."""
        g_in, g_out, _ = self._compute(pos, state, prev_out, prev_in)
        return g_in, g_out

    def side_watermarks(self, pos: Sequence[Any], state: Optional[BatchState],
                        prev_out: Sequence[int], prev_in: Optional[Sequence[int]] = None
                        ) -> Dict[int, List[int]]:
        """The watermark of each side input of each side step and each combine with side inputs
        (by index), under the same assumptions as `watermarks`."""
        wm = self._compute(pos, state, prev_out, prev_in)[2]
        return {node.ref: [wm[pc] for pc in node.sides] for node in self.nodes if node.sides}

    def _compute(self, pos: Sequence[Any], state: Optional[BatchState], prev_out: Sequence[int],
                 prev_in: Optional[Sequence[int]]) -> Tuple[List[int], List[int], Dict[int, int]]:
        wm = self.source_watermarks(pos)
        g_in = [MIN] * self.n_groupings
        g_out = list(prev_out)
        for node in self.nodes:
            if node.kind in SOURCES:
                continue
            w = min((wm[pc] for pc in node.inputs), default=MAX)
            if node.kind in HOLDING:
                g_in[node.ref] = w
                hold = state.min_hold(node.ref) if state is not None else MAX
                if prev_in is not None and prev_in[node.ref] < hold:
                    hold = prev_in[node.ref]
                w = max(min(w, hold), prev_out[node.ref])
                g_out[node.ref] = w
            for pc in node.outputs:
                wm[pc] = w
        return g_in, g_out, wm
