"""The streaming query's offsets and the control values of one micro-batch, typed.

An `Offset` is where the query stands after a micro-batch: the sources' positions and every
watermark, processing time and Spark clock the coordinator computed for that batch
(`coordinator.Coordinator.next_offset`). Spark's Python data source API passes offsets as JSON
(dicts), and Spark keeps them in its offset log in the checkpoint, so a replayed batch reads
exactly the same values back; `Offset.to_json` and `Offset.from_json` are the one place that
converts, and the keys on disk are short (`_KEYS`).

`Control` is what every operator of a micro-batch must know, derived from the offsets the batch
runs between (`Control.between`); the source sends it to every operator as the control row
(`rows.CTL`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Tuple

from headrace.errors import PipelineExecutionError

#: the JSON key of each field of an Offset, in the order written (Spark's offset log holds these)
_KEYS = (
    ("batch", "n"), ("positions", "pos"), ("reserved", "next"),
    ("island_processing_times", "pt"), ("round_robin", "rr"), ("processing_times", "gpt"),
    ("input_watermarks", "w"), ("output_watermarks", "o"),
    ("output_watermarks_before", "op"), ("clock", "clock"), ("side_input_watermarks", "s"),
    ("next_clock", "stamp"),
)


@dataclass
class Offset:
    """The query's offset after one micro-batch (see the module doc). Watermarks and
    processing times are in microseconds, Spark clocks in milliseconds (`coordinator.to_clock`);
    per-grouping lists are indexed by grouping (or side step) index."""

    batch: int                      # the batch's number (-1: before the first batch)
    positions: List[Any]            # each source's position after the batch
    reserved: List[Any]             # the positions the next advance of unbounded sources reads up to
    island_processing_times: List[int]   # each island's processing time in the batch
    round_robin: List[int]          # each island's next TestStream to step (round robin)
    processing_times: List[int]     # each grouping's processing time (its island's)
    input_watermarks: List[int]     # each grouping's input watermark in the batch
    output_watermarks: List[int]    # each grouping's output watermark in the batch
    output_watermarks_before: List[int]   # each grouping's output watermark in the batch before
    clock: int                      # the Spark clock during the batch (Spark's watermark in it)
    next_clock: int                 # the next batch's Spark clock, stamped on this batch's rows
    # the watermarks of the side inputs of each side step and combine with side inputs, by index
    side_input_watermarks: Dict[int, List[int]]

    def to_json(self) -> Dict[str, Any]:
        """The offset as Spark keeps it (a JSON object, keys in a fixed order)."""
        out: Dict[str, Any] = {}
        for name, key in _KEYS:
            value = getattr(self, name)
            if name == "side_input_watermarks":
                value = {str(g): list(ws) for g, ws in value.items()}
            elif isinstance(value, list):
                value = list(value)
            out[key] = value
        return out

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Offset":
        """An offset `to_json` made (as Spark hands it back); an offset of another format is
        refused."""
        missing = [key for _, key in _KEYS if key not in data]
        if missing:
            raise PipelineExecutionError(
                f"headrace streaming: the query's offset {data!r} lacks {', '.join(missing)}: it "
                "was written by another version of headrace, whose checkpoints this one cannot "
                "resume; give the pipeline a new --checkpoint_location")
        values = {name: data[key] for name, key in _KEYS}
        values["side_input_watermarks"] = {
            int(g): list(ws) for g, ws in data["s"].items()}
        return cls(**values)


class Control(NamedTuple):
    """What every operator of one micro-batch must know, from the offsets it runs between
    (replay-stable); per-grouping lists are indexed by grouping (or side step) index."""

    batch: int                      # the batch's number
    input_watermarks_before: List[int]   # the groupings' input watermarks in the batch before
    input_watermarks: List[int]     # the groupings' input watermarks in this batch
    output_watermarks: List[int]    # the groupings' output watermarks in this batch
    processing_times: List[int]     # the groupings' processing times (each island has its own)
    clock: int                      # this batch's Spark clock (Spark's watermark in it)
    next_clock: int                 # the next batch's Spark clock (stamped on this batch's rows)
    # the watermarks of the side inputs of each side step and combine with side inputs, by index
    side_input_watermarks: Dict[int, List[int]]
    # the groupings' output watermarks in the batch before (what the next level's input
    # watermark was then)
    output_watermarks_before: List[int]
    # the steps of a chunk of a TestStream's script, for the groupings that take them one by one
    # (`coordinator.Coordinator.chunk_steps`): {grouping: [(bundle end, watermark, processing time)]}
    steps: Dict[int, List[Tuple[int, int, int]]] = {}

    @classmethod
    def between(cls, start: Offset, end: Offset) -> "Control":
        """The control values of the batch from offset `start` to offset `end`."""
        return cls(end.batch, list(start.input_watermarks), list(end.input_watermarks),
                   list(end.output_watermarks), list(end.processing_times), end.clock,
                   end.next_clock, dict(end.side_input_watermarks),
                   list(start.output_watermarks))
