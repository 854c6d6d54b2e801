"""Beam's and the paper's trigger names, as sugar over the formal algebra (`triggers.algebra`).

Each name here is the algebra under another name or a fixed expression of it:

* Beam's AfterCount (ElemCount), AfterProcessingTime (SinceEarliestElem), AfterAny
  (AfterFirst), Repeatedly (Repeat), AfterWatermark(early=, late=) (AfterEach of
  Repeat(early).orFinally(EndOfWindow) and Repeat(late)), DefaultTrigger (Repeat(EndOfWindow))
  and Always (Repeat(ElemCount(1))); Beam's AfterAll, AfterEach, OrFinally and Never are the
  algebra's own names;
* the paper's AtCount (ElemCount), AtWatermark (EndOfWindow), SequenceOf (AfterEach) and
  RepeatUntil (Repeat(trigger).orFinally(until)); its AtPeriod is a leaf of the algebra.

The sugar adds no semantics: a name's states, readiness and merging are those of the
expression it stands for.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.model.triggers.algebra import (
    AfterEach, AfterFirst, ElemCount, EndOfWindow, OrFinally, Repeat, SinceEarliestElem,
    TriggerContext, TriggerFn,
)


# ---------------------------------------------------------------------------------------
# new names for the algebra's own triggers


class AfterCount(ElemCount):
    """Beam's AfterCount(n): fires once `n` elements have arrived (ElemCount)."""


class AtCount(ElemCount):
    """The paper's AtCount(n): fires once `n` elements have arrived (ElemCount)."""


class AtWatermark(EndOfWindow):
    """The paper's AtWatermark(): fires when the watermark passes the end of the window (EndOfWindow)."""

    def __repr__(self) -> str:
        return "AtWatermark()"


class AfterProcessingTime(SinceEarliestElem):
    """Beam's AfterProcessingTime(delay): fires `delay` of processing time after the pane's first element."""


class AfterAny(AfterFirst):
    """Beam's AfterAny(*triggers): fires when any subtrigger fires, then finishes (AfterFirst)."""


class SequenceOf(AfterEach):
    """The paper's SequenceOf(*triggers): each subtrigger in turn (AfterEach)."""


class Repeatedly(Repeat):
    """Beam's Repeatedly(trigger): fires every time the trigger is ready, forever (Repeat)."""


class RepeatUntil(OrFinally):
    """The paper's RepeatUntil(trigger, until): Repeat(trigger) until `until` fires."""

    def __init__(self, trigger: TriggerFn, until: TriggerFn) -> None:
        super().__init__(Repeat(trigger), until)

    def __repr__(self) -> str:
        main = self.triggers[0]
        inner = main.triggers[0] if isinstance(main, Repeat) else main
        return f"RepeatUntil({inner!r}, {self.triggers[1]!r})"


# ---------------------------------------------------------------------------------------
# named expressions of the algebra


class _Sugar(TriggerFn):
    """A named trigger defined as an expression of the core algebra (`self.expr`)."""

    expr: TriggerFn

    def _set_expr(self, expr: TriggerFn) -> None:
        self.expr = expr
        self.watermark_only = expr.watermark_only
        self.processing_time_free = expr.processing_time_free

    @property
    def blind_before_end_of_window(self) -> bool:
        """As the expression."""
        return self.expr.blind_before_end_of_window

    @property
    def finishes_at_end_of_window(self) -> bool:
        """As the expression."""
        return self.expr.finishes_at_end_of_window

    def initial_state(self) -> Any:
        """As the expression."""
        return self.expr.initial_state()

    def is_done(self, state: Any) -> bool:
        """As the expression."""
        return self.expr.is_done(state)

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """As the expression."""
        return self.expr.ready(state, ctx)

    def fires(self, state: Any, ctx: TriggerContext) -> bool:
        """As the expression."""
        return self.expr.fires(state, ctx)

    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """As the expression."""
        return self.expr.on_element(state, timestamp_us, ctx)

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """As the expression."""
        return self.expr.next(state, ctx)

    def restart(self, state: Any) -> Any:
        """As the expression."""
        return self.expr.restart(state)

    def reset(self, state: Any) -> Any:
        """As the expression."""
        return self.expr.reset(state)

    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """As the expression."""
        return self.expr.rewind(state, ctx)

    def further(self, a: Any, b: Any) -> Any:
        """As the expression."""
        return self.expr.further(a, b)

    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """As the expression."""
        return self.expr.wakeup(state, ctx)

    def is_once(self) -> bool:
        """As the expression."""
        return self.expr.is_once()

    def current(self, state: Any) -> TriggerFn:
        """The expression's current trigger."""
        return self.expr.current(state)

    def lowered(self) -> TriggerFn:
        """The expression, lowered."""
        return self.expr.lowered()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.expr == self.expr

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.expr))


class AfterWatermark(_Sugar):
    """Beam's AfterWatermark(early=None, late=None): fires when the watermark passes the end of the window.

    With `early`, Repeat(early) fires before that (until the end of the window); with `late`,
    Repeat(late) fires after it. As the spec writes it:
    AfterEach(Repeat(early).orFinally(EndOfWindow), Repeat(late)).
    """

    def __init__(self, early: Optional[TriggerFn] = None, late: Optional[TriggerFn] = None) -> None:
        for name, t in (("early", early), ("late", late)):
            if t is not None and not isinstance(t, TriggerFn):
                raise InvalidArgumentError(
                    f"AfterWatermark({name}=...) takes a trigger such as AfterCount(1) or "
                    f"AfterProcessingTime(60), got {type(t).__name__} {t!r}")
        self.early, self.late = early, late
        on_time: TriggerFn = EndOfWindow()
        if early is not None:
            on_time = OrFinally(Repeat(early), on_time)
        self._set_expr(on_time if late is None else AfterEach(on_time, Repeat(late)))

    def __repr__(self) -> str:
        args = [f"{n}={t!r}" for n, t in (("early", self.early), ("late", self.late)) if t is not None]
        return f"AfterWatermark({', '.join(args)})"


class DefaultTrigger(_Sugar):
    """Beam's default trigger: fires as the watermark passes the window end, then per batch of late data.

    As the spec writes it: Repeat(EndOfWindow).
    """

    def __init__(self) -> None:
        self._set_expr(Repeat(EndOfWindow()))

    def __repr__(self) -> str:
        return "DefaultTrigger()"


class Always(_Sugar):
    """Beam's Always(): fires after every element, forever (Repeat(ElemCount(1)))."""

    def __init__(self) -> None:
        self._set_expr(Repeat(ElemCount(1)))

    def __repr__(self) -> str:
        return "Always()"
