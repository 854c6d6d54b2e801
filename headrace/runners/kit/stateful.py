"""Stateful DoFns (user state and timers) as every runner runs them, around one key at a time.

A runner decides where a key's `UserKeyState` lives (a dict in the local runner, a key's
sorted records in a Spark batch task, the state store in streaming) and which watermark and
processing time it sees; `StatefulCore` does the rest, the same everywhere:

* state is per key and window: `UserKeyState.windows` maps each window the key has seen to its
  `WindowCells` (state cells by spec name, timers by (timer name, dynamic tag));
* `process` runs the DoFn on a key's elements, once per window of each element, with the
  state cells and timers of that window bound to its `DoFn.StateParam` / `DoFn.TimerParam`
  parameters; an element whose window has expired (end + allowed lateness behind the input
  watermark) is dropped and counted (`headrace/dropped_late_elements`), as Beam does;
* `on_watermark` fires the event-time timers the watermark passed (a timer at t fires once
  the watermark is after t, as a window ending at t+1 closes), earliest first, each removed
  before its callback (which may set it again; one set in the past fires in the same call),
  then expires the windows the watermark passed the end + allowed lateness of: calls the
  `@on_window_expiration` method, if any, and drops the window's state and timers;
* `on_processing_time` fires the processing-time timers that are due (at or before now);
* a watermark at +infinity (the end of the input) is also the end of processing time: the
  remaining processing-time timers fire then, before the windows expire;
* holds: an event-time timer holds the output watermark at its time until it fires; a
  processing-time timer at the timestamp of the element (or timer) that set it, which is also
  the timestamp of what its callback outputs; a timer set through `with_no_output_timestamp()`
  holds nothing; with an `@on_window_expiration` method, a live
  window holds it at the window's max timestamp (the timestamp of that method's outputs).

Outputs go to the ParDoRunner's receivers, which the runner sets (by output tag).
"""

from __future__ import annotations

import bisect
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Tuple

from headrace.errors import ElementError, InvalidArgumentError, PipelineExecutionError, _short_repr
from headrace.metrics.metric import Metrics, MetricsContainer, metrics_scope
from headrace.model.time import (
    END_OF_GLOBAL_WINDOW_MICROS, MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS, Timestamp,
    set_processing_time,
)
from headrace.model.strategy import Windowing
from headrace.model.windowed import WindowedValue
from headrace.runners.kit.dofn_runner import ParDoRunner
from headrace.runners.kit.grouping import DROPPED_LATE, split_kv
from headrace.runners.kit.stage import StepSpec, retried_bundle, serialize_dofn, step_spec
from headrace.pipeline import userstate
from headrace.pipeline.userstate import (
    BagStateSpec, CombiningValueStateSpec, MapStateSpec, OrderedListStateSpec,
    ReadModifyWriteStateSpec, SetStateSpec, StateSpec, TimerSpec,
)

MAX = MAX_TIMESTAMP_MICROS

#: A pending timer: (fire time, hold / output timestamp, event time?), all in microseconds.
TimerRecord = Tuple[int, int, bool]


class WindowCells:
    """A key's state in one window: its state cells by spec name and its pending timers by
    (timer name, dynamic tag)."""

    __slots__ = ("cells", "timers")

    def __init__(self) -> None:
        self.cells: Dict[str, Any] = {}
        self.timers: Dict[Tuple[str, str], TimerRecord] = {}

    def __getstate__(self) -> Tuple[Any, ...]:
        return (self.cells, self.timers)

    def __setstate__(self, s: Tuple[Any, ...]) -> None:
        self.cells, self.timers = s


class UserKeyState:
    """A key's user state: its `WindowCells` by window (plain data; runners pickle it)."""

    __slots__ = ("windows",)

    def __init__(self) -> None:
        self.windows: Dict[Any, WindowCells] = {}

    def is_empty(self) -> bool:
        """Whether nothing is kept for the key (it can be forgotten)."""
        return not self.windows

    def __getstate__(self) -> Dict[Any, WindowCells]:
        return self.windows

    def __setstate__(self, s: Dict[Any, WindowCells]) -> None:
        self.windows = s


# ---- the state cells user code sees --------------------------------------------------------

class _RuntimeState:
    """A state cell of the current key and window, as user code sees it."""

    __slots__ = ("_cells", "_name")

    def __init__(self, cells: Dict[str, Any], name: str) -> None:
        self._cells = cells
        self._name = name

    def prefetch(self) -> None:
        """Nothing to prefetch: the key's state is loaded with it."""

    def finalize(self) -> None:
        """Nothing to flush: changes are kept as they are made."""

    def commit(self) -> None:
        """Nothing to commit: the runner commits the key's state with its bundle."""

    def clear(self) -> None:
        """Empties the cell."""
        self._cells.pop(self._name, None)


class ReadModifyWriteRuntimeState(_RuntimeState):
    """A single value of the current key and window."""

    __slots__ = ()

    def read(self) -> Any:
        """The value, or None when none was written."""
        return self._cells.get(self._name)

    def write(self, value: Any) -> None:
        """Replaces the value."""
        self._cells[self._name] = value


class BagRuntimeState(_RuntimeState):
    """A bag of values of the current key and window."""

    __slots__ = ()

    def read(self) -> List[Any]:
        """The values, in the order they were added."""
        return list(self._cells.get(self._name, ()))

    def add(self, value: Any) -> None:
        """Adds a value."""
        bag = self._cells.get(self._name)
        if bag is None:
            self._cells[self._name] = [value]
        else:
            bag.append(value)


class SetRuntimeState(_RuntimeState):
    """A set of values of the current key and window."""

    __slots__ = ()

    def read(self) -> set:
        """The values."""
        return set(self._cells.get(self._name, ()))

    def add(self, value: Any) -> None:
        """Adds a value (kept once)."""
        self._cells.setdefault(self._name, {})[value] = None


class CombiningValueRuntimeState(_RuntimeState):
    """A value combined (by the spec's CombineFn) from what is added, per key and window."""

    __slots__ = ("_fn",)

    def __init__(self, cells: Dict[str, Any], name: str, fn: Any) -> None:
        super().__init__(cells, name)
        self._fn = fn

    def read(self) -> Any:
        """The CombineFn's output for the values added (its empty output when none)."""
        acc = self._cells.get(self._name)
        if acc is None:
            acc = self._fn.create_accumulator()
        return self._fn.extract_output(acc)

    def add(self, value: Any) -> None:
        """Adds a value to the accumulator."""
        acc = self._cells.get(self._name)
        if acc is None:
            acc = self._fn.create_accumulator()
        self._cells[self._name] = self._fn.add_input(acc, value)


def _micros(t: Any, what: str) -> int:
    try:
        return Timestamp.of(t).micros
    except Exception as exc:
        raise InvalidArgumentError(
            f"{what} needs a timestamp (seconds, a Timestamp or a datetime), got {t!r}") from exc


def _ts_key(item: Tuple[int, Any]) -> int:
    return item[0]


class OrderedListRuntimeState(_RuntimeState):
    """(timestamp, value) pairs of the current key and window, read in timestamp order (those
    with equal timestamps in the order added)."""

    __slots__ = ()

    def _list(self) -> List[Tuple[int, Any]]:
        return self._cells.get(self._name, [])  # type: ignore[no-any-return]

    def read(self) -> List[Tuple[Timestamp, Any]]:
        """Every (Timestamp, value), in timestamp order."""
        return [(Timestamp(micros=t), v) for t, v in self._list()]

    def add(self, value: Tuple[Any, Any]) -> None:
        """Adds a (timestamp, value) pair."""
        try:
            ts, v = value
        except (TypeError, ValueError):
            raise InvalidArgumentError(
                f"OrderedListState.add takes a (timestamp, value) pair, got {_short_repr(value)}"
            ) from None
        lst = self._cells.setdefault(self._name, [])
        bisect.insort_right(lst, (_micros(ts, "OrderedListState.add"), v), key=_ts_key)

    def _bounds(self, lo: Any, hi: Any) -> Tuple[int, int]:
        lst = self._list()
        a = bisect.bisect_left(lst, _micros(lo, "OrderedListState range"), key=_ts_key)
        b = bisect.bisect_left(lst, _micros(hi, "OrderedListState range"), key=_ts_key)
        return a, b

    def read_range(self, min_timestamp: Any, limit_timestamp: Any) -> List[Tuple[Timestamp, Any]]:
        """The pairs with min_timestamp <= timestamp < limit_timestamp, in timestamp order."""
        a, b = self._bounds(min_timestamp, limit_timestamp)
        return [(Timestamp(micros=t), v) for t, v in self._list()[a:b]]

    def clear_range(self, min_timestamp: Any, limit_timestamp: Any) -> None:
        """Removes the pairs with min_timestamp <= timestamp < limit_timestamp."""
        a, b = self._bounds(min_timestamp, limit_timestamp)
        lst = self._list()
        if b > a:
            del lst[a:b]
            if not lst:
                self.clear()


class MapRuntimeState(_RuntimeState):
    """A map from keys to values, of the current key and window."""

    __slots__ = ()

    def _map(self) -> Dict[Any, Any]:
        return self._cells.get(self._name, {})  # type: ignore[no-any-return]

    def get(self, key: Any, default: Any = None) -> Any:
        """The value at `key`, or `default`."""
        return self._map().get(key, default)

    def put(self, key: Any, value: Any) -> None:
        """Sets the value at `key`."""
        self._cells.setdefault(self._name, {})[key] = value

    def remove(self, key: Any) -> None:
        """Removes `key` (nothing if absent)."""
        m = self._map()
        if key in m:
            del m[key]
            if not m:
                self.clear()

    def contains(self, key: Any) -> bool:
        """Whether `key` has a value."""
        return key in self._map()

    def keys(self) -> List[Any]:
        """The keys."""
        return list(self._map())

    def values(self) -> List[Any]:
        """The values."""
        return list(self._map().values())

    def items(self) -> List[Tuple[Any, Any]]:
        """The (key, value) pairs."""
        return list(self._map().items())

    def read(self) -> Dict[Any, Any]:
        """A copy of the map."""
        return dict(self._map())

    def is_empty(self) -> bool:
        """Whether the map has no key."""
        return not self._map()


class RuntimeTimer:
    """A timer of the current key and window, as user code sees it: `set(timestamp,
    dynamic_timer_tag='')`, `clear(dynamic_timer_tag='')` and `with_no_output_timestamp()`."""

    __slots__ = ("_spec", "_cells", "_window", "_expiry", "_output_ts")

    def __init__(self, spec: TimerSpec, cells: WindowCells, window: Any, expiry: int,
                 output_ts: int) -> None:
        self._spec = spec
        self._cells = cells
        self._window = window
        self._expiry = expiry
        self._output_ts = output_ts

    def set(self, timestamp: Any, dynamic_timer_tag: str = "") -> None:
        """Sets (or moves) the timer to fire at `timestamp` (event or processing time)."""
        spec = self._spec
        t = _micros(timestamp, f"timer {spec.name!r}: set")
        if spec.is_event_time:
            if t > self._expiry:
                raise InvalidArgumentError(
                    f"event-time timer {spec.name!r} set for {Timestamp(micros=t)}, after its window "
                    f"{self._window} expires at {Timestamp(micros=self._expiry)} (its end plus the "
                    "allowed lateness); set it at or before window.max_timestamp() (+ the allowed "
                    "lateness)")
            record: TimerRecord = (t, t if self._output_ts != MAX else MAX, True)
        else:
            record = (t, self._output_ts, False)
        self._cells.timers[(spec.name, str(dynamic_timer_tag))] = record

    def with_no_output_timestamp(self) -> "RuntimeTimer":
        """This timer, set so that it holds no watermark (Beam Java's `withNoOutputTimestamp`):
        for a clean-up timer whose callback outputs nothing (its outputs would carry the end of
        time, so no window of a later grouping would take them)."""
        return RuntimeTimer(self._spec, self._cells, self._window, self._expiry, MAX)

    def clear(self, dynamic_timer_tag: str = "") -> None:
        """Cancels the timer (with that dynamic tag)."""
        self._cells.timers.pop((self._spec.name, str(dynamic_timer_tag)), None)


# ---- the core ---------------------------------------------------------------------------------

class _Context:
    """What the ParDoRunner binds state, timer, key and dynamic-tag parameters to."""

    __slots__ = ("core", "key", "window", "cells", "expiry", "output_ts", "tag")

    def __init__(self, core: "StatefulCore") -> None:
        self.core = core
        self.key: Any = None
        self.window: Any = None
        self.cells = WindowCells()
        self.expiry = MAX
        self.output_ts = MIN_TIMESTAMP_MICROS
        self.tag = ""

    def state(self, spec: StateSpec) -> Any:
        """The cell `spec` of the current key and window."""
        cells, name = self.cells.cells, spec.name
        if isinstance(spec, BagStateSpec):
            return BagRuntimeState(cells, name)
        if isinstance(spec, CombiningValueStateSpec):
            return CombiningValueRuntimeState(cells, name, self.core.combine_fn(spec))
        if isinstance(spec, SetStateSpec):
            return SetRuntimeState(cells, name)
        if isinstance(spec, OrderedListStateSpec):
            return OrderedListRuntimeState(cells, name)
        if isinstance(spec, MapStateSpec):
            return MapRuntimeState(cells, name)
        if isinstance(spec, ReadModifyWriteStateSpec):
            return ReadModifyWriteRuntimeState(cells, name)
        raise InvalidArgumentError(f"unknown kind of state spec {spec!r}")

    def timer(self, spec: TimerSpec) -> RuntimeTimer:
        """The timer `spec` of the current key and window."""
        return RuntimeTimer(spec, self.cells, self.window, self.expiry, self.output_ts)


def expiry_of(window: Any, lateness_us: int) -> int:
    """When a window's state expires: its max timestamp plus the allowed lateness (at most
    just before +infinity, so that every window expires at the end of the input)."""
    m = window.max_timestamp_us
    if m >= END_OF_GLOBAL_WINDOW_MICROS or m + lateness_us >= MAX:
        return MAX - 1
    return m + lateness_us  # type: ignore[no-any-return]


class StatefulCore:
    """One stateful ParDo step's DoFn, run for one key at a time (see the module doc).

    `runner` is the step's ParDoRunner (receivers set by the runner); `windowing` its input's.
    With `processing_time_at_expiry` (the batch runner, where processing time only moves at
    the end), a window's pending processing-time timers fire when it expires, not dropped."""

    def __init__(self, runner: ParDoRunner, windowing: Windowing,
                 processing_time_at_expiry: bool = False) -> None:
        self.runner = runner
        self.label = runner.label
        self.lateness_us = windowing.allowed_lateness_us
        self.processing_time_at_expiry = processing_time_at_expiry
        dofn = runner.dofn
        userstate.validate_stateful_dofn(dofn)
        _, timer_specs = userstate.get_dofn_specs(dofn)
        self.callbacks: Dict[str, Tuple[TimerSpec, Callable[..., Any]]] = {
            s.name: (s, getattr(dofn, userstate.timer_callback_name(dofn, s))) for s in timer_specs}
        name = userstate.window_expiration_method(dofn)
        self.on_expiry: Optional[Callable[..., Any]] = getattr(dofn, name) if name else None
        self._fns: Dict[int, Any] = {}
        self.ctx = _Context(self)
        runner.user_context = self.ctx

    def combine_fn(self, spec: CombiningValueStateSpec) -> Any:
        """The spec's CombineFn (a copy set up once per core)."""
        fn = self._fns.get(id(spec))
        if fn is None:
            fn = self._fns[id(spec)] = spec.combine_fn
            fn.setup()
        return fn

    def _bind(self, key: Any, window: Any, cells: WindowCells, output_ts: int, tag: str = "") -> None:
        ctx = self.ctx
        ctx.key, ctx.window, ctx.cells, ctx.output_ts, ctx.tag = key, window, cells, output_ts, tag
        ctx.expiry = expiry_of(window, self.lateness_us)

    # ---- events of one key -----------------------------------------------------------------

    def process(self, key: Any, state: UserKeyState, elements: List[WindowedValue], watermark: int,
                now: Optional[int]) -> None:
        """Runs the DoFn on the key's elements (one window each, in order) at input watermark
        `watermark` and processing time `now` (what `Timestamp.now()` gives the DoFn; None: the
        wall clock); elements of expired windows are dropped and counted."""
        before = set_processing_time(now)
        try:
            self._process(key, state, elements, watermark)
        finally:
            set_processing_time(before)

    def _process(self, key: Any, state: UserKeyState, elements: List[WindowedValue],
                 watermark: int) -> None:
        windows = state.windows
        lateness = self.lateness_us
        process = self.runner.process
        dropped = 0
        for wv in elements:
            w = wv.windows[0]
            if expiry_of(w, lateness) < watermark:
                dropped += 1
                continue
            cells = windows.get(w)
            if cells is None:
                cells = windows[w] = WindowCells()
            self._bind(key, w, cells, wv.timestamp_us)
            process(wv)
            self._tidy(state, w, cells)
        if dropped:
            Metrics.counter("headrace", DROPPED_LATE).inc(dropped)

    def on_watermark(self, key: Any, state: UserKeyState, watermark: int, now: Optional[int]) -> None:
        """Fires the event-time timers the watermark passed, earliest first, then expires the
        windows it passed (at +infinity, processing-time timers fire first: see the module doc)."""
        before = set_processing_time(now)
        try:
            self._on_watermark(key, state, watermark)
        finally:
            set_processing_time(before)

    def _on_watermark(self, key: Any, state: UserKeyState, watermark: int) -> None:
        end = watermark >= MAX
        while True:
            if not self._fire_next(key, state, True, watermark - 1):
                if not (end and self._fire_next(key, state, False, MAX)):
                    break
        for w in [w for w in state.windows if expiry_of(w, self.lateness_us) < watermark]:
            cells = state.windows[w]
            if self.processing_time_at_expiry:
                while self._fire_next(key, state, False, MAX, only=w):
                    pass
            if self.on_expiry is not None:
                self._bind(key, w, cells, w.max_timestamp_us)
                self._call(self.on_expiry, WindowedValue(None, w.max_timestamp_us, (w,)),
                           f"@on_window_expiration of window {w}")
            state.windows.pop(w, None)

    def on_processing_time(self, key: Any, state: UserKeyState, now: int, watermark: int) -> None:
        """Fires the processing-time timers due at `now`, earliest first."""
        before = set_processing_time(now)
        try:
            while self._fire_next(key, state, False, now):
                pass
        finally:
            set_processing_time(before)

    def _fire_next(self, key: Any, state: UserKeyState, event: bool, upto: int,
                   only: Any = None) -> bool:
        """Fires the earliest timer of the domain due at or before `upto`; False if none."""
        best: Optional[Tuple[int, Any, str, str]] = None
        best_w: Any = None
        for w, cells in state.windows.items():
            if only is not None and w != only:
                continue
            for (name, tag), (t, _, ev) in cells.timers.items():
                if ev is event and t <= upto:
                    k = (t, getattr(w, "start_us", 0), name, tag)
                    if best is None or k < best:
                        best, best_w = k, w
        if best is None:
            return False
        _, _, name, tag = best
        cells = state.windows[best_w]
        _, hold, _ = cells.timers.pop((name, tag))
        spec, callback = self.callbacks[name]
        self._bind(key, best_w, cells, hold, tag)
        self._call(callback, WindowedValue(None, hold, (best_w,)),
                   f"timer {name!r}{f' (tag {tag!r})' if tag else ''} of window {best_w}, due at "
                   f"{Timestamp(micros=best[0])},")
        self._tidy(state, best_w, cells)
        return True

    def _call(self, method: Callable[..., Any], wv: WindowedValue, what: str) -> None:
        try:
            self.runner.invoke_callback(method, wv)
        except ElementError as err:
            err.phase, err.element = what, self.ctx.key
            raise

    def _tidy(self, state: UserKeyState, window: Any, cells: WindowCells) -> None:
        """Forgets a window with nothing kept, unless its expiry must still be reported."""
        if not cells.cells and not cells.timers and self.on_expiry is None:
            state.windows.pop(window, None)

    # ---- what the runner schedules --------------------------------------------------------

    def next_processing_time(self, state: UserKeyState) -> int:
        """The earliest processing-time timer of the key (MAX_TIMESTAMP_MICROS: none)."""
        best = MAX
        for cells in state.windows.values():
            for t, _, ev in cells.timers.values():
                if not ev and t < best:
                    best = t
        return best

    def next_event_time(self, state: UserKeyState) -> int:
        """The least input watermark at which the key has something to do (a timer to fire or a
        window to expire: the instant after it); MAX_TIMESTAMP_MICROS: nothing before the end."""
        best = MAX - 1
        for w, cells in state.windows.items():
            e = expiry_of(w, self.lateness_us)
            if e < best:
                best = e
            for t, _, ev in cells.timers.values():
                if ev and t < best:
                    best = t
        return best + 1

    def output_hold(self, state: UserKeyState) -> int:
        """The earliest timestamp the key may still output (it holds the output watermark)."""
        best = MAX
        expiring = self.on_expiry is not None
        for w, cells in state.windows.items():
            if expiring and w.max_timestamp_us < best:
                best = w.max_timestamp_us
            for _, h, _ in cells.timers.values():
                if h < best:
                    best = h
        return best


def keyed_elements(label: str, bundle: List[WindowedValue]) -> Iterator[Tuple[Any, WindowedValue]]:
    """Each (key, element in one window) of a stateful step's input bundle, or an error naming
    the step for an element that is not a (key, value) pair."""
    for wv in bundle:
        k, _ = split_kv(label, wv.value)
        if len(wv.windows) == 1:
            yield k, wv
        else:
            for w in wv.windows:
                yield k, WindowedValue(wv.value, wv.timestamp_us, (w,), wv.pane_info, wv.is_retraction)


# ---- a stateful step in a runner's process or task --------------------------------------------

class StatefulSpec(NamedTuple):
    """A stateful ParDo as plain data a runner can ship to its workers."""

    step: StepSpec
    windowing: Windowing

    @staticmethod
    def of(node: Any) -> "StatefulSpec":
        """The spec of a stateful ParDo application."""
        label = node.full_label
        if node.side_inputs:
            raise PipelineExecutionError(
                f"step {label!r}: a DoFn with state or timers cannot read side inputs yet; join the "
                "side data into the main input first (e.g. with CoGroupByKey)", step=label)
        return StatefulSpec(step_spec(node, serialize_dofn(label, node.transform.fn)),
                            node.inputs[0].windowing)

    @property
    def label(self) -> str:
        """The step's full label."""
        return self.step.label


class StatefulStep:
    """A stateful step where it runs: its `StatefulCore`, its outputs by PCollection id, and
    bundles run with whole-bundle retries (a failed attempt's outputs, metric updates and state
    changes are dropped, and its DoFn torn down), as `kit.stage.FusedStage` runs a stage."""

    def __init__(self, spec: StatefulSpec, processing_time_at_expiry: bool = False) -> None:
        self.spec = spec
        self.label = spec.label
        self.processing_time_at_expiry = processing_time_at_expiry
        self.outs: Dict[int, List[WindowedValue]] = {pc: [] for _, pc in spec.step.outputs}
        self._core: Optional[StatefulCore] = None

    def core(self) -> StatefulCore:
        """The core (its DoFn built, wired and set up on first use)."""
        core = self._core
        if core is None:
            s = self.spec.step
            assert s.dofn is not None
            runner = ParDoRunner.of(s)
            rec: Dict[Optional[str], List[Any]] = {}
            for tag, pc in s.outputs:
                if tag is not None and tag == s.main_tag:
                    continue
                rec[tag] = [self.outs[pc].append]
            runner.receivers = rec
            runner.bind()
            core = self._core = StatefulCore(runner, self.spec.windowing, self.processing_time_at_expiry)
            with metrics_scope(None, self.label):
                runner.setup()
        return core

    def run_bundle(self, body: Callable[[StatefulCore], None], restore: Callable[[], None],
                   max_attempts: int, committed: MetricsContainer, attempted: MetricsContainer,
                   size: int = 0) -> Dict[int, List[WindowedValue]]:
        """Runs `body(core)` as one bundle (start_bundle, body, finish_bundle), retrying it whole
        after calling `restore` (which puts back the keys' state as it was before); returns the
        bundle's outputs by PCollection id."""
        def attempt() -> Dict[int, List[WindowedValue]]:
            for lst in self.outs.values():
                lst.clear()
            core = self.core()
            core.runner.start_bundle()
            body(core)
            core.runner.finish_bundle()
            return {pc: list(lst) for pc, lst in self.outs.items()}

        def failed() -> None:
            self.teardown()
            restore()
        return retried_bundle(self.label, max_attempts, committed, attempted, attempt, failed)

    def teardown(self) -> None:
        """Tears the DoFn down (the next bundle builds a fresh one)."""
        core = self._core
        if core is None:
            return
        self._core = None
        with metrics_scope(None, self.label):
            core.runner.teardown()
            for fn in core._fns.values():
                fn.teardown()
