"""The stateful operator of the streaming runner: the stateful steps of one level as one
`transformWithState` processor, which routes each Spark grouping key's rows to its operator.

Rows arrive grouped by (`kind`, `key`) and sorted, so each partition first sees its control row
(`rows.CTL`: this batch's watermarks and processing time, see `coordinator`) with the batch's
side-input elements, then pass-through rows, then the keys of the operators, each key's index
(`rows.grouping_of`) naming its step:

* a grouping (`grouping`): a bucket of keys of a GroupByKey or CombinePerKey;
* a side step (`side_steps`): a spread key of a stage's main input, held until its side inputs'
  windows are complete; the side inputs are kept on every partition's control key;
* a stateful ParDo (`stateful`): a bucket of keys of a DoFn with user state and timers;
* a splittable ParDo (`splittable`): a bucket of its live works (restrictions left to process).

Spark timers wake the keys of the four up alike.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Tuple

from headrace.errors import PipelineExecutionError
from headrace.model import coders
from headrace.model.windowed import WindowedValue
from headrace.runners.spark.streaming import rows
from headrace.runners.spark.streaming.buckets import KeyCell
from headrace.runners.spark.streaming.grouping import (
    GroupingOperator, GroupingSpec, elements_of, partials_of,
)
from headrace.runners.spark.streaming.side_steps import (
    SideInputStore, SideStepOperator, SideStepSpec, add_side_row,
)
from headrace.runners.spark.streaming.splittable import (
    ReadJournal, SplittableOperator, SplittableStepSpec,
)
from headrace.runners.spark.streaming.stateful import StatefulOperator, StatefulStepSpec

def processor(specs: Dict[int, Any], forward_key: bytes, env: Any, reads_dir: str) -> Any:
    """The StatefulProcessor running `specs` (GroupingSpecs, SideStepSpecs, StatefulStepSpecs
    and SplittableStepSpecs, by index), for `transformWithState`; the partition whose control key is
    `forward_key` passes the control row on; splittable steps journal reads in `reads_dir`.

    What Spark pickles is light: a class of its own (pickled by value) holding the steps as
    bytes, whose `init` only declares the state cell; the steps are loaded at the first key.
    Spark runs `init` and `close` alone once on the driver, at a query's first micro-batch, in a
    fresh Python process (to learn the state's schema): that process imports no headrace
    module, which took it about half a second."""
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    payload = coders.dumps((specs, forward_key, env, reads_dir))

    class HeadraceGroupings(StatefulProcessor):  # type: ignore[misc]
        """headrace's stateful steps as one transformWithState processor (see the module doc)."""

        def init(self, handle: Any) -> None:
            from pyspark.sql.types import BinaryType, StructField, StructType
            self.handle = handle
            self.cell = handle.getValueState("key_state", StructType([StructField("b", BinaryType())]))
            self.steps: Any = None

        def _steps(self) -> Any:
            if self.steps is None:
                from headrace.runners.spark.streaming.processor import Steps
                self.steps = Steps(payload, self.handle, self.cell)
            return self.steps

        def handleInputRows(self, key: Any, rows_: Any, timerValues: Any) -> Iterator[Any]:
            return self._steps().input(key, rows_)  # type: ignore[no-any-return]

        def handleExpiredTimer(self, key: Any, timerValues: Any, expiredTimerInfo: Any
                               ) -> Iterator[Any]:
            return self._steps().expired(key, expiredTimerInfo)  # type: ignore[no-any-return]

        def close(self) -> None:
            if self.steps is not None:
                self.steps.close()

    return HeadraceGroupings()


class Steps:
    """The stateful steps of one processor in a task (`processor`): the operators, routing
    each Spark grouping key's rows and timers to its step."""

    def __init__(self, payload: bytes, handle: Any, cell: Any) -> None:
        specs, self.forward_key, self.env, reads_dir = coders.loads(payload)
        self.env.install_registrations()   # the driver's registered coders, for user keys
        self.side_step_specs = {g: sp for g, sp in specs.items() if isinstance(sp, SideStepSpec)}
        groupings = {g: sp for g, sp in specs.items() if isinstance(sp, GroupingSpec)}
        self.lifted = {g for g, sp in groupings.items() if sp.lifted}
        stateful = {g: sp for g, sp in specs.items() if isinstance(sp, StatefulStepSpec)}
        splittable = {g: sp for g, sp in specs.items() if isinstance(sp, SplittableStepSpec)}
        side_specs = {g: sp for g, sp in specs.items() if getattr(sp, "sides", ())}
        self.has_sides = bool(side_specs)
        self.cell = KeyCell(handle, cell)
        self.store = SideInputStore(self.cell, side_specs)
        self.side_steps = SideStepOperator(self.cell, self.side_step_specs)
        self.groupings = GroupingOperator(self.cell, groupings, self.store)
        self.stateful = StatefulOperator(self.cell, stateful, self.env.max_attempts)
        self.splittable = SplittableOperator(self.cell, splittable, self.env.max_attempts,
                                             ReadJournal(reads_dir))
        self.keyed = {**{g: self.stateful for g in stateful},   # operators of element buckets
                      **{g: self.splittable for g in splittable}}

    def input(self, key: Any, rows_: Any) -> Iterator[Any]:
        """A Spark grouping key's rows, as pyspark Rows."""
        return _guard(self._input(key, rows_), self.env)

    def expired(self, key: Any, expiredTimerInfo: Any) -> Iterator[Any]:
        """A bucket's or side step key's Spark timer, as pyspark Rows."""
        g = rows.grouping_of(self.cell.at(key))
        ctl = self.cell.control()
        expired = expiredTimerInfo.getExpiryTimeInMs()
        if g in self.side_step_specs:
            return _guard(self.side_steps.run(g, ctl, (), expired), self.env)
        return _guard(self.keyed.get(g, self.groupings).run(g, ctl, {}, expired), self.env)

    def close(self) -> None:
        """Tears down the operators."""
        self.stateful.close()
        self.splittable.close()
        self.groupings.close()

    def _input(self, key: Any, rows_: Any) -> Iterator[rows.Row]:
        """Routes one Spark grouping key's rows."""
        kind, kb = key[0], self.cell.at(key)
        if kind == rows.CTL:
            yield from self._control_rows(kb, rows_)
        elif kind == rows.PASS:
            for r in rows_:
                yield (rows.PASS, r.pc, b"", r.bundle, r.seq, bytes(r.payload))
        else:
            ctl = self.cell.control()
            g = rows.grouping_of(kb)
            if g in self.side_step_specs:
                yield from self.side_steps.run(g, ctl, rows_, None)
            elif g in self.lifted:
                yield from self.groupings.run(g, ctl, partials_of(rows_), None)
            elif g in self.keyed:   # a stateful or splittable ParDo
                yield from self.keyed[g].run(g, ctl, elements_of(rows_), None)
            else:
                yield from self.groupings.run(g, ctl, elements_of(rows_), None)

    def _control_rows(self, kb: bytes, rows_: Any) -> Iterator[rows.Row]:
        """A partition's control key: the batch's control row (passed on by one partition)
        and side-input elements (kept in the side-input store)."""
        new_sides: Dict[int, List[Tuple[int, int, WindowedValue]]] = {}
        for r in rows_:
            if r.pc != rows.CTL_PC:   # a side-input element (sent to every partition)
                add_side_row(new_sides, r)
                continue
            self.cell.ctl = rows.loads(bytes(r.payload))
            if kb == self.forward_key:  # one partition passes the control row on
                yield (rows.PASS, rows.CTL_PC, b"", 0, 0, bytes(r.payload))
        if self.has_sides:
            yield from self.store.receive(new_sides)


def _guard(gen: Iterator[rows.Row], env: Any) -> Iterator[Any]:
    """`gen`'s rows as pyspark Rows; a pipeline failure recorded (`WorkerEnv.fail`)."""
    try:
        for t in gen:
            yield _as_row(t)
    except PipelineExecutionError as exc:
        raise env.fail(exc) from exc


_ROW: Any = None


def _as_row(t: rows.Row) -> Any:
    """A row tuple as a pyspark Row of the rows' columns."""
    global _ROW
    if _ROW is None:
        from pyspark.sql import Row
        _ROW = Row(*rows.COLUMNS)
    return _ROW(*t)
