"""TestStream scripts on the streaming runner: their watermarks, their elements, and the chunks
of steps one micro-batch may perform (pure Python, on the driver and in the source's reader).

The coordinator (`coordinator.py`) performs a script step by step, as the local runner settles
after each event; but a batch costs a fixed few hundred milliseconds, so a script of thousands
of steps would take many minutes. `ScriptChunks` finds the islands of a pipeline in which a
batch may perform many steps (up to `--test_stream_events_per_batch` events) with the same panes
(docs/semantics.md, "A chunk of script events in one batch"), and gives the groupings there the
steps of a chunk (`steps`), which they take one by one, key by key (`grouping._run_steps`).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.runners.kit.plan import Kind
from headrace.runners.spark.streaming.offsets import Offset
from headrace.testing.test_stream import ElementEvent, ProcessingTimeEvent, WatermarkEvent

MIN = MIN_TIMESTAMP_MICROS
MAX = MAX_TIMESTAMP_MICROS

# Node kinds (`coordinator.Node`): a SOURCE has all its elements in the first batch, then
# +infinity; an UNBOUNDED source what it has, batch after batch; a TEST_STREAM one event per
# batch (or a chunk); a GROUPING (also a stateful ParDo), a SIDE_STEP (a stage with side inputs,
# its main input held until they are ready) and a SPLITTABLE step (its live works) hold their
# output watermark by their keys' holds; the others (STAGE, FLATTEN, RESHUFFLE) pass watermarks on.
SOURCES = (Kind.SOURCE, Kind.UNBOUNDED, Kind.TEST_STREAM)
HOLDING = (Kind.GROUPING, Kind.SIDE_STEP, Kind.SPLITTABLE)

#: a step of a chunk, for one grouping: (bundle end, watermark, processing time)
Step = Tuple[int, int, int]


def script_elements(script: List[Any], start: int, end: int
                    ) -> List[Tuple[int, Optional[str], List[Any]]]:
    """The element events among events [start, end) of a TestStream script: (index, tag,
    values)."""
    return [(q, e.tag, list(e.timestamped_values))
            for q, e in enumerate(script[start:min(end, len(script))], start)
            if isinstance(e, ElementEvent)]


class ScriptChunks:
    """Which islands take their TestStream a chunk of steps per batch, and the chunks' steps.

    `nodes` are the coordinator's nodes in dependency order, `scripts[i]` source i's script (None:
    no TestStream), `source_island[i]` its island; `islands` the number of islands;
    `unbounded` the indexes of unbounded sources; `events` the most events of a chunk."""

    def __init__(self, nodes: Sequence[Any], scripts: Sequence[Optional[List[Any]]],
                 source_island: Sequence[int], islands: int, unbounded: Set[int],
                 events: int) -> None:
        self.nodes = tuple(nodes)
        self.scripts = list(scripts)
        self.source_island = list(source_island)
        self.events = max(1, int(events))
        self.unbounded = set(unbounded)
        # per island: its first groupings (None: the island goes step by step)
        self.first: List[Optional[Set[int]]] = [None] * islands
        self._prefix: Dict[Tuple[int, Optional[str]], List[int]] = {}

    def find(self, plain: Set[int], end_only: Set[int]) -> None:
        """Finds the islands whose TestStream may perform many steps in one micro-batch with
        the panes of one step per batch: an island with one TestStream and no other source but
        Creates, whose holding steps are either *first* groupings (in `plain`: a GroupByKey or
        CombinePerKey without side inputs, reading the sources' elements through element-wise
        steps only), which take a chunk's steps one by one, key by key, at each step's
        watermark and processing time, or groupings in `end_only` (global window, a trigger
        that fires only at the end of it) reading what the first ones output, which fire once,
        when the script is over, whatever the order their input came in; holding steps that
        read only what those emit get it after the script, too. Any other holding step (a
        stateful or splittable ParDo, a side step, a grouping with side inputs or a trigger that
        fires before the end of input) on the first groupings' output depends on the
        watermarks their holds make at each step, which the driver knows only batch by batch:
        such an island goes step by step."""
        for k in range(len(self.first)):
            sources = [i for i, isl in enumerate(self.source_island) if isl == k]
            streams = [i for i in sources if self.scripts[i] is not None]
            if len(streams) == 1 and not any(i in self.unbounded for i in sources):
                self.first[k] = self._first_groupings(set(sources), plain, end_only)

    def _first_groupings(self, sources: Set[int], plain: Set[int], end_only: Set[int]
                         ) -> Optional[Set[int]]:
        """The first groupings of the island of `sources`, or None if it cannot be chunked
        (`find`)."""
        # a PCollection is "raw" (the sources' elements through element-wise steps), "timed"
        # (a first grouping's output, or downstream of one), "done" (made once the script is
        # over), or "mixed" (raw and done)
        kind: Dict[int, str] = {}
        first: Set[int] = set()
        for node in self.nodes:
            if node.kind in SOURCES:
                if node.ref in sources:
                    kind.update((pc, "raw") for pc in node.outputs)
                continue
            got = {kind.get(pc) for pc in list(node.inputs) + list(node.sides)}
            if not got & {"raw", "timed", "done", "mixed"}:
                continue   # another island's
            if node.kind in HOLDING:
                grouping = node.kind is Kind.GROUPING and not node.sides
                if got == {"done"}:
                    out = "done"
                elif grouping and node.ref in plain and got == {"raw"}:
                    first.add(node.ref)
                    out = "timed"
                elif grouping and node.ref in end_only:
                    out = "done"
                else:
                    return None
            elif "timed" in got:
                out = "timed"
            else:
                out = "raw" if got == {"raw"} else "done" if got == {"done"} else "mixed"
            kind.update((pc, out) for pc in node.outputs)
        return first

    def chunked(self) -> Set[int]:
        """The groupings that take a TestStream's steps a chunk at a time (`find`)."""
        return set().union(*[c for c in self.first if c is not None])

    def end(self, i: int, p: int, pt: int) -> Optional[Tuple[int, int]]:
        """(position, processing time) after the next chunk of TestStream source i at position
        `p` and processing time `pt` (the final step included when reached); None when its
        island goes step by step."""
        if self.first[self.source_island[i]] is None:
            return None
        script = self.scripts[i]
        assert script is not None
        q = min(p + self.events, len(script) + 1)   # len(script) + 1: after the final step
        for e in script[p:q]:
            if isinstance(e, ProcessingTimeEvent):
                pt += e.advance_by.micros
        return q, pt

    def steps(self, start: Offset, end: Offset) -> Dict[int, List[Step]]:
        """For each first grouping of an island whose TestStream moved in the batch from
        `start` to `end`: its steps in order, each (bundle end, watermark, processing time):
        the elements of bundles below the bundle end come in that step (bundle ids are
        `(source << 32) | event index`), after which the grouping's input watermark and
        processing time are those. The first entry is where it stood before the chunk. Derived
        from the script alone, so a replayed batch gets the same."""
        out: Dict[int, List[Step]] = {}
        for k, first in enumerate(self.first):
            if not first:
                continue
            i = next(j for j, s in enumerate(self.scripts)
                     if s is not None and self.source_island[j] == k)
            a, b = start.positions[i], end.positions[i]
            if a == b:
                continue
            script = self.scripts[i]
            assert script is not None
            pos = list(start.positions)
            pt = start.island_processing_times[k]
            g_in = self._first_watermarks(k, pos)
            steps: Dict[int, List[Step]] = {g: [(0, g_in[g], pt)] for g in first}
            for q in range(a, b):
                if q < len(script) and isinstance(script[q], ProcessingTimeEvent):
                    pt += script[q].advance_by.micros
                pos[i] = q + 1
                g_in = self._first_watermarks(k, pos)
                for g in first:
                    steps[g].append(((i << 32) | (q + 1), g_in[g], pt))
            out.update(steps)
        return out

    def watermark(self, i: int, tag: Optional[str], done: int) -> int:
        """The watermark of output `tag` of TestStream source i after the first `done` events of
        its script (`done == len(script) + 1`: after the final step, which moves every output to
        +infinity), from a table made once per output."""
        script = self.scripts[i]
        assert script is not None
        if done > len(script):
            return MAX
        table = self._prefix.get((i, tag))
        if table is None:
            table = [MIN]
            for e in script:
                w = table[-1]
                if isinstance(e, WatermarkEvent) and e.tag == tag:
                    w = max(w, e.new_watermark.micros)
                table.append(w)
            self._prefix[(i, tag)] = table
        return table[done]

    def _first_watermarks(self, k: int, pos: Sequence[Any]) -> Dict[int, int]:
        """The input watermark of each first grouping of island k at source positions `pos`: a
        function of its sources alone (a TestStream, Creates)."""
        first = self.first[k]
        assert first is not None
        wm: Dict[int, int] = {}
        for node in self.nodes:
            if node.kind is Kind.SOURCE and self.source_island[node.ref] == k:
                for pc in node.outputs:
                    wm[pc] = MAX if pos[node.ref] else MIN
            elif node.kind is Kind.TEST_STREAM and self.source_island[node.ref] == k:
                for pc, tag in zip(node.outputs, node.tags):
                    wm[pc] = self.watermark(node.ref, tag, pos[node.ref])
            elif (node.kind not in HOLDING and node.kind not in SOURCES and node.inputs
                  and all(pc in wm for pc in node.inputs)):
                w = min(wm[pc] for pc in node.inputs)
                for pc in node.outputs:
                    wm[pc] = w
        return {node.ref: min(wm[pc] for pc in node.inputs) for node in self.nodes
                if node.kind is Kind.GROUPING and node.ref in first}
