"""Side steps and the side-input store of the streaming runner's stateful operator.

A stage with side inputs runs one level after its *side step*, which holds the stage's main
input back until the side-input windows each element reads are complete (their side input's
watermark passed the window's end), then releases it to the stage, as the local runner's stage
with side inputs does. A side step keeps one Spark grouping key per spread key of its main input
(`stages`), its state a `SideRecord`.

The side inputs themselves are kept on every partition's control key (`SideInputStore`): each
batch's side-input elements are sent to every partition (`rows.CTL` rows), added there to the
store ({side pc: {window: [values]}}), and the contents each side step reads sent on to the
stages of the next level (`rows.SIDE_PC`); a combine with side inputs (`grouping`) reads them
from the store directly.
"""

from __future__ import annotations

import pickle
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import side_input_window
from headrace.model.windowed import WindowedValue
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.buckets import KeyCell
from headrace.runners.spark.streaming.offsets import Control
from headrace.runners.spark.worker.packing import pack

MAX = MAX_TIMESTAMP_MICROS

#: (side index, side pc id, side WindowFn) of each side input of a step or combine
Sides = Tuple[Tuple[int, int, Any], ...]
#: a side step's or grouping's side inputs: side index -> {window: [values]}
SideContents = Dict[int, Dict[Any, list]]


class SideStepSpec(NamedTuple):
    """A stage with side inputs as its side step sees it (picklable): the step holds the stage's
    main input back until the side-input windows an element reads are complete, then releases
    it (as rows of `released`) to the stage, which runs in the next element-wise function."""

    ref: int
    label: str
    released: int                                  # `rows.released_pc(ref)`
    sides: Sides                                   # (side index, side pc id, side WindowFn)


class SideRecord:
    """A side step key's stored state: its waiting elements (with the watermark each came at),
    its registered Spark timer and the hold it last reported."""

    __slots__ = ("waiting", "timer", "hold")

    def __init__(self) -> None:
        self.waiting: List[Tuple[int, WindowedValue]] = []
        self.timer: Optional[int] = None
        self.hold = MAX

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.waiting, self.timer, self.hold)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.waiting, self.timer, self.hold = s


def window_ready(sides: Sides, side_wms: List[int], window: Any) -> bool:
    """Whether the side-input windows main window `window` reads are all complete (each side
    input's watermark passed the window's end, or is at +infinity)."""
    for idx, _, windowfn in sides:
        wm = side_wms[idx] if idx < len(side_wms) else MIN_TIMESTAMP_MICROS
        if wm != MAX and wm < side_input_window(windowfn, window).end_us:
            return False
    return True


def sides_ready(sides: Sides, side_wms: List[int], wv: WindowedValue) -> bool:
    """Whether every side-input window `wv` reads is complete."""
    return all(window_ready(sides, side_wms, w) for w in wv.windows)


class SideInputStore:
    """The side inputs kept on a partition's control key, and the contents each side step and
    combine with side inputs of the processor reads (`specs`: those with side inputs, by
    index)."""

    def __init__(self, cell: KeyCell, specs: Dict[int, Any]) -> None:
        self.cell = cell
        self.specs = specs
        self.contents: Dict[int, SideContents] = {}   # index -> its side inputs

    def receive(self, new: Dict[int, List[Tuple[int, int, WindowedValue]]]) -> Iterator[rows.Row]:
        """On a partition's control key: adds the batch's side-input elements (side pc ->
        [(bundle, place, element)]) to the store and sends them, per side step, to this
        partition's stages (`rows.SIDE_PC`)."""
        store: Dict[int, Dict[Any, list]] = self.cell.load() or {}
        if new:
            for pc, wvs in new.items():
                by_window = store.setdefault(pc, {})
                for _, _, wv in sorted(wvs, key=lambda x: (x[0], x[1])):
                    for w in wv.windows:
                        by_window.setdefault(w, []).append(wv.value)
            self.cell.save(store)
        for g, spec in self.specs.items():
            contents = {idx: store.get(pc, {}) for idx, pc, _ in spec.sides}
            self.contents[g] = contents
            if isinstance(spec, SideStepSpec):
                yield (rows.PASS, rows.SIDE_PC, b"", 0, 0, rows.dumps((g, contents)))


def add_side_row(new: Dict[int, List[Tuple[int, int, WindowedValue]]], r: Any) -> None:
    """Adds a side-input row's elements (sent to every partition's control key) to `new`:
    side pc -> [(bundle, place, element)]."""
    new.setdefault(r.pc, []).extend((r.bundle, r.seq, wv) for wv in pickle.loads(r.payload))


class SideStepOperator:
    """The side steps of one processor (`steps`: by index)."""

    def __init__(self, cell: KeyCell, steps: Dict[int, SideStepSpec]) -> None:
        self.cell = cell
        self.steps = steps

    def run(self, g: int, ctl: Control, rows_: Any, expired: Optional[int]) -> Iterator[rows.Row]:
        """A key of side step `g`: its waiting elements, plus the new ones in `rows_` (each
        with the watermark it came at), released once the step's output watermark reached that
        watermark and the side-input windows it reads are complete; the rest hold the step's
        output watermark."""
        step = self.steps[g]
        rec: Any = self.cell.load() or SideRecord()
        waiting: List[Tuple[int, WindowedValue]] = list(rec.waiting)
        came = ctl.input_watermarks_before[g]
        for _, wv in _arrived(rows_):
            waiting.append((came, wv))
        released, kept = self._release(step, ctl, waiting)
        if released:
            yield (rows.PASS, step.released, b"", ctl.batch, 0, pack(released))
        hold = MAX
        for arrived, wv in kept:
            h = wv.timestamp_us if wv.timestamp_us > arrived else arrived
            if h < hold:
                hold = h
        timer = ctl.clock + 1 if kept else None   # look again next batch
        yield from self.cell.timer_and_hold(g, rec, expired, timer, hold)
        if kept:
            rec.waiting = kept
            self.cell.save(rec)
        else:
            self.cell.clear()

    @staticmethod
    def _release(step: SideStepSpec, ctl: Control, waiting: List[Tuple[int, WindowedValue]]
                 ) -> Tuple[List[WindowedValue], List[Tuple[int, WindowedValue]]]:
        """The waiting elements to release now, and those to keep."""
        # Released into the next level, an element is judged there against the watermark
        # that level saw before this batch: this step's output watermark then.
        out_wm = ctl.output_watermarks_before[step.ref]
        side_wms = ctl.side_input_watermarks.get(step.ref, [])
        released: List[WindowedValue] = []
        kept: List[Tuple[int, WindowedValue]] = []
        for arrived, wv in waiting:
            if arrived <= out_wm and sides_ready(step.sides, side_wms, wv):
                released.append(wv)
            else:
                kept.append((arrived, wv))
        return released, kept


def _arrived(rows_: Any) -> List[Tuple[int, WindowedValue]]:
    """A side step key's new elements in order, from its rows (each row: the key's (bundle,
    place, element) items of one partition)."""
    batches: Dict[int, List[Tuple[int, WindowedValue]]] = {}
    for r in rows_:
        rows.add_items(batches, pickle.loads(r.payload))
    return [(seq, wv) for bundle in sorted(batches)
            for seq, wv in sorted(batches[bundle], key=lambda x: x[0])]
