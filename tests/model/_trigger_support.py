"""Helpers for the trigger-algebra tests: contexts, a driver, and the spec's tables written literally.

The spec is Beam's formal trigger specification (Kenneth Knowles, "Apache Beam Triggering
Semantics"). The reference functions here
(`spec_is_done`, `tombstones`) work on trigger *values* as `current(state)` writes them, so
they check the implementation against the spec's own tables, not against itself.
"""

from __future__ import annotations

from typing import Any, Iterator, List, Optional, Sequence, Tuple

from headrace.model.time import MAX_TIMESTAMP_MICROS
from headrace.model.window import IntervalWindow
from headrace.transforms.trigger import (
    AfterAll, AfterEach, AfterFirst, Done, LeafTrigger, OrFinally, Repeat, TriggerContext, TriggerFn,
)

S = 1_000_000  # microseconds per second
MAX = MAX_TIMESTAMP_MICROS
NO_WAKEUP = (MAX, MAX)

Event = Tuple[Any, ...]


def ctx(window: Any, wm_us: int = 0, pt_us: int = 0) -> TriggerContext:
    """A context for `window` at input watermark `wm_us` and processing time `pt_us`."""
    return TriggerContext(window, wm_us, pt_us)


def win(start_s: int, end_s: int) -> IntervalWindow:
    """IntervalWindow(start_s, end_s), in seconds."""
    return IntervalWindow(start_s, end_s)


def union(windows: Sequence[IntervalWindow]) -> IntervalWindow:
    """The merged (session-style) window covering all of `windows`."""
    out = windows[0]
    for w in windows[1:]:
        out = out.union(w)
    return out


def drive(trigger: TriggerFn, window: Any, events: Sequence[Event], state: Any = None,
          wm_us: int = 0, pt_us: int = 0, fire: bool = True
          ) -> Tuple[Any, int, int, List[Tuple[Any, TriggerContext]]]:
    """Runs `events` on one window's trigger state, like the per-key core does.

    Events: ("elem", event_timestamp_us) is an element arriving at the current processing
    time; ("wm", d) / ("pt", d) advance the watermark / processing time by d >= 0 (time is
    monotone); ("fire",) fires the trigger when it is ready and not done (`next`), as the
    core does. With fire=False, ("fire",) events are ignored. Returns the final state, the
    final watermark and processing time, and the (state, ctx) after every event.
    """
    s = trigger.initial_state() if state is None else state
    trace: List[Tuple[Any, TriggerContext]] = []
    for ev in events:
        kind = ev[0]
        if kind == "wm":
            wm_us += ev[1]
        elif kind == "pt":
            pt_us += ev[1]
        elif kind == "elem":
            s = trigger.on_element(s, ev[1], TriggerContext(window, wm_us, pt_us))
        elif kind == "fire" and fire:
            c = TriggerContext(window, wm_us, pt_us)
            if not trigger.is_done(s) and trigger.ready(s, c):
                s = trigger.next(s, c)
        trace.append((s, TriggerContext(window, wm_us, pt_us)))
    return s, wm_us, pt_us, trace


class Run:
    """One window's trigger driven step by step, for example-based tests (times in seconds)."""

    def __init__(self, trigger: TriggerFn, window: Any, wm_s: float = 0, pt_s: float = 0,
                 state: Any = None) -> None:
        self.trigger = trigger
        self.window = window
        self.wm_us = round(wm_s * S)
        self.pt_us = round(pt_s * S)
        self.state = trigger.initial_state() if state is None else state
        self.fired: List[int] = []  # element counts at which the trigger fired
        self.count = 0

    @property
    def ctx(self) -> TriggerContext:
        return TriggerContext(self.window, self.wm_us, self.pt_us)

    def at(self, wm_s: Optional[float] = None, pt_s: Optional[float] = None) -> "Run":
        """Moves the watermark and/or processing time (seconds)."""
        if wm_s is not None:
            self.wm_us = round(wm_s * S)
        if pt_s is not None:
            self.pt_us = round(pt_s * S)
        return self

    def elem(self, ts_us: int = 0) -> "Run":
        """One element with event timestamp `ts_us`, arriving now."""
        self.state = self.trigger.on_element(self.state, ts_us, self.ctx)
        self.count += 1
        return self

    def ready(self) -> bool:
        return self.trigger.ready(self.state, self.ctx)

    def done(self) -> bool:
        return self.trigger.is_done(self.state)

    def fire(self) -> bool:
        """Fires (next) when ready and not done, as the core does; True when it fired."""
        if not self.done() and self.ready():
            self.state = self.trigger.next(self.state, self.ctx)
            self.fired.append(self.count)
            return True
        return False

    def feed(self, n: int) -> "Run":
        """n elements, firing after each one when ready."""
        for _ in range(n):
            self.elem()
            self.fire()
        return self

    @property
    def current(self) -> TriggerFn:
        return self.trigger.current(self.state)


# ---- the spec's tables over trigger values ------------------------------------------------


def children(t: TriggerFn) -> Tuple[TriggerFn, ...]:
    """The subtriggers of a trigger value (sugar is looked through to its expression)."""
    if hasattr(t, "expr"):
        return (t.expr,)
    if isinstance(t, (Done, LeafTrigger)):
        return ()
    return tuple(t.triggers)


def walk(t: TriggerFn) -> Iterator[TriggerFn]:
    """Every node of a trigger value, depth first."""
    yield t
    for c in children(t):
        yield from walk(c)


def tombstones(t: TriggerFn) -> List[TriggerFn]:
    """The Done(...) nodes of a trigger value."""
    return [n for n in walk(t) if isinstance(n, Done)]


def spec_is_done(t: TriggerFn) -> bool:
    """The spec's isDone table, over a trigger value such as `current(state)`.

    isDone(Done(...)) = True; isDone(LeafTrigger) = False; AfterFirst: any; AfterAll: all;
    Repeat: False; AfterEach: all; R1.orFinally(R2): isDone(R1) or isDone(R2).
    """
    if hasattr(t, "expr"):
        return spec_is_done(t.expr)
    if isinstance(t, Done):
        return True
    if isinstance(t, LeafTrigger):
        return False
    if isinstance(t, Repeat):
        return False
    if isinstance(t, OrFinally):
        return spec_is_done(t.triggers[0]) or spec_is_done(t.triggers[1])
    if isinstance(t, AfterFirst):
        return any(spec_is_done(c) for c in t.triggers)
    if isinstance(t, (AfterAll, AfterEach)):
        return all(spec_is_done(c) for c in t.triggers)
    raise AssertionError(f"unexpected trigger node {t!r}")
