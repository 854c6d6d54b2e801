"""Triggers: the formal trigger algebra of Beam's trigger specification, literally.

The specification is Kenneth Knowles's "Apache Beam Triggering Semantics" design document
(summarised in Beam's trigger docs, https://beam.apache.org/documentation/programming-guide/#triggers).

A trigger R is an immutable value; for one key and window it stands for a monotone
predicate P_R(elements since R last fired, time). Its per-window *state* is plain data that
summarises those elements, held by the per-key core (`headrace.model.reduce`).

Grammar (checked at construction; a violation raises InvalidArgumentError)::

    Trigger     ::= OnceTrigger | AfterEach(Trigger+) | Repeat(Trigger)
                  | OrFinally(Trigger, OnceTrigger)
    OnceTrigger ::= LeafTrigger | Done(LeafTrigger)
                  | AfterFirst(OnceTrigger+) | AfterAll(OnceTrigger+)
    LeafTrigger ::= ElemCount(k) | EndOfWindow() | SinceEarliestElem(delay)
                  | AtPeriod(period, offset) | Never() | a user's LeafTrigger subclass

The operations, as the spec defines them (`s` is a state, `ctx` the window and the times):

* `is_done(s)`: Done leaves are done; AfterFirst/OrFinally when any child is, AfterAll and
  AfterEach when all are; Repeat never.
* `ready(s, ctx)` is P_R: a Done leaf is ready; ElemCount(k) when n >= k; EndOfWindow when the
  input watermark has reached the end of the window; SinceEarliestElem(d) when processing
  time is d past the arrival of the earliest element; AfterFirst = any, AfterAll = all,
  AfterEach = its first child not done, Repeat = its child, OrFinally = either branch.
* `next(s)` after a firing: a leaf becomes Done (its state, which stood for elements now
  emitted, is discarded); AfterFirst/OrFinally take `next_if_ready` of every child; AfterAll
  `next` of every child; AfterEach advances its first unfinished child; Repeat restarts its
  child when `next` finishes it.
* `restart(s)` lifts Done tombstones; `rewind(s, ctx)` undoes a Done EndOfWindow when the
  merged window's end is still ahead of the watermark (and restarts AfterEach children after
  the active one); `further(a, b)` takes, leaf by leaf, the further of two states (Done wins,
  otherwise the element summaries merge: counts add, earliest arrivals take the minimum).
* Merging windows: `merge_states(states, ctx) = further(rewind(s1), rewind(s2), ...)`, which is
  commutative and associative.
* `on_element(s, timestamp_us, ctx)` updates every leaf that is not Done (so AfterEach's later
  children observe elements too, as the spec asks, for `further` after merges).

Two readings where the spec is silent (both are Beam's behaviour, Java and Python):

* When AfterEach fires, its children after the active one are reset, because a trigger's
  state stands for the elements since the trigger last fired; so AfterEach(AfterCount(2),
  AfterCount(3)) fires after 2 and then after 3 more elements.
* SinceEarliestElem and AtPeriod measure *processing* time from the arrival of the first
  element since the last firing (Beam's AfterProcessingTime); event time and processing time
  are never compared with each other.

This module holds the algebra alone: TriggerContext, TriggerFn, the leaves (LeafTrigger,
ElemCount, EndOfWindow, SinceEarliestElem, AtPeriod, Never), Done, the composites (AfterFirst,
AfterAll, AfterEach, Repeat, OrFinally) and `check_trigger`. Beam's and the paper's names
(AfterCount, AfterWatermark(early=, late=), Repeatedly, AtCount, SequenceOf, ...) are sugar
over it in `headrace.model.triggers.sugar`. Users define leaf triggers by subclassing
`LeafTrigger` (see its docstring).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from functools import reduce
from typing import TYPE_CHECKING, Any, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.model.time import MAX_TIMESTAMP_MICROS, duration_micros, to_micros

if TYPE_CHECKING:  # window.py imports this module
    from headrace.model.window import BoundedWindow


class TriggerContext:
    """What a trigger sees when asked: the window, the input watermark and the processing time."""

    __slots__ = ("window", "input_watermark_us", "processing_time_us")

    # The window asked about: the core may build a context with None and set the window
    # before it asks anything.
    window: BoundedWindow
    input_watermark_us: int
    processing_time_us: int

    def __init__(self, window: Any, input_watermark_us: int, processing_time_us: int) -> None:
        self.window = window
        self.input_watermark_us = input_watermark_us
        self.processing_time_us = processing_time_us


NO_WAKEUP: Tuple[int, int] = (MAX_TIMESTAMP_MICROS, MAX_TIMESTAMP_MICROS)

#: A leaf's state: `(done, data)`.
LeafState = Tuple[bool, Any]

#: The state of a Done leaf (the spec's tombstone).
_DONE: LeafState = (True, None)


def _earliest(a: Tuple[int, int], b: Tuple[int, int]) -> Tuple[int, int]:
    return (a[0] if a[0] < b[0] else b[0], a[1] if a[1] < b[1] else b[1])


def _seconds(micros: int) -> str:
    """Seconds as written in a repr that reads back exactly."""
    whole, frac = divmod(micros, 1_000_000)
    return str(whole) if not frac else repr(micros / 1e6)


class TriggerFn(ABC):
    """Base class of triggers: an immutable value whose per-window state is plain data.

    The per-key core calls `initial_state`, `on_element`, `ready`, `next`, `is_done`,
    `merge_states` and `wakeup`; `restart`, `rewind` and `further` are the spec's merging
    operations. States are tuples (leaves: `(done, data)`), picklable and comparable.

    An abstract base class: the algebra's operations are abstract (LeafTrigger, Done and the
    composites implement them; users subclass LeafTrigger, not this class).
    """

    #: True when the trigger depends on nothing but the watermark (the core then skips
    #: per-element trigger bookkeeping).
    watermark_only = False

    #: True when the trigger never waits for processing time (no SinceEarliestElem / AtPeriod
    #: leaf, and no user leaf, whose deadlines are unknown): a runner may then treat a pure
    #: advance of processing time as a no-op.
    processing_time_free = False

    @property
    def blind_before_end_of_window(self) -> bool:
        """Whether no element can make the trigger ready while the watermark is before the end of
        the window and processing time stays where it is: its parts that can be active before the
        end of the window are built of end-of-window, `Never` and processing-time delays
        (positive) that start at an element's arrival; no element count, no aligned period
        (ready at once on a boundary). Each trigger class answers for itself (a user's leaf: no).
        """
        return False

    @property
    def finishes_at_end_of_window(self) -> bool:
        """Whether the trigger finishes only once the watermark passed the end of the window."""
        return False

    # ---- the algebra (implemented by leaves and composites) ---------------------------

    @abstractmethod
    def initial_state(self) -> Any:
        """The state of a window no element has reached yet."""
        raise NotImplementedError

    @abstractmethod
    def is_done(self, state: Any) -> bool:
        """True when the trigger has finished (it will never fire again for this window)."""
        raise NotImplementedError

    @abstractmethod
    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """The ready predicate P_R over the elements summarised by `state` and the times in `ctx`."""
        raise NotImplementedError

    @abstractmethod
    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """The state after one more element (event time `timestamp_us`, arriving at ctx's times)."""
        raise NotImplementedError

    @abstractmethod
    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """The state after the trigger fired (the spec's `next`)."""
        raise NotImplementedError

    @abstractmethod
    def restart(self, state: Any) -> Any:
        """The state with every Done tombstone lifted (the spec's `restart`)."""
        raise NotImplementedError

    @abstractmethod
    def reset(self, state: Any) -> Any:
        """`restart(state)` with every element summary cleared: a trigger that has seen nothing yet.

        Used where the spec clears state because it stood for elements already emitted: when
        Repeat restarts its finished child, and for AfterEach's later children when it fires.
        """
        raise NotImplementedError

    @abstractmethod
    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """The state rewound for a merge into `ctx.window` (the spec's `rewind`)."""
        raise NotImplementedError

    @abstractmethod
    def further(self, a: Any, b: Any) -> Any:
        """The further along of two states, element summaries merged (the spec's `further`)."""
        raise NotImplementedError

    @abstractmethod
    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """(watermark, processing time) at which the trigger may become ready with no new element.

        Times already reached in `ctx`, and triggers that can only become ready on elements,
        give MAX_TIMESTAMP_MICROS.
        """
        raise NotImplementedError

    def is_once(self) -> bool:
        """True for OnceTriggers (they fire at most once); the grammar needs them in places."""
        return False

    # ---- derived ------------------------------------------------------------------------

    def fires(self, state: Any, ctx: TriggerContext) -> bool:
        """True when the trigger is not done and is ready: its window fires."""
        return not self.is_done(state) and self.ready(state, ctx)

    def next_if_ready(self, state: Any, ctx: TriggerContext) -> Any:
        """`next(state)` when the trigger is ready, else `state` unchanged."""
        return self.next(state, ctx) if self.ready(state, ctx) else state

    def merge_states(self, states: Any, ctx: TriggerContext) -> Any:
        """The state of a window merged from windows with these states: further of the rewound states."""
        rewound = [self.rewind(s, ctx) for s in states]
        return reduce(self.further, rewound)

    def current(self, state: Any) -> "TriggerFn":
        """The trigger as the spec writes it after transitions: Done(...) tombstones in place."""
        return self

    def lowered(self) -> "TriggerFn":
        """The trigger with every name over the algebra replaced by its expression (`sugar`):
        the same states, readiness and merging, evaluated without a call per name; the
        per-key core runs this form."""
        return self

    def or_finally(self, until: "TriggerFn") -> "OrFinally":
        """`R.orFinally(until)`: this trigger until `until` fires, then done."""
        return OrFinally(self, until)


# ---------------------------------------------------------------------------------------
# leaves


class LeafTrigger(TriggerFn):
    """Base class of leaf triggers, including users' own.

    A leaf's state is `(done, data)`; a subclass says what `data` summarises:

    * `initial_data()`: data for no elements (default None);
    * `add_element(data, timestamp_us, ctx)`: data after one more element (default unchanged);
    * `is_ready(data, ctx)`: the ready predicate; it must be monotone (once ready, more
      elements or later times keep it ready);
    * `merge_data(a, b)`: data summarising both element sets (default: `a`);
    * `deadline(data, ctx)`: (watermark, processing time) at which it becomes ready without
      new elements, MAX_TIMESTAMP_MICROS for "not by time alone";
    * `rewinds(ctx)`: True when a Done leaf must come back to life after a merge into
      ctx.window (only EndOfWindow does, while the merged window's end is ahead).

    Instances must be immutable and comparable (define `__eq__`/`__hash__` or use a frozen
    dataclass) because windowing strategies are compared. `is_ready` is abstract (a subclass
    that does not define it cannot be instantiated); the other hooks have defaults.
    """

    def initial_data(self) -> Any:
        """Data summarising no elements."""
        return None

    def add_element(self, data: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """Data after one more element."""
        return data

    @abstractmethod
    def is_ready(self, data: Any, ctx: TriggerContext) -> bool:
        """The leaf's ready predicate over its data."""
        raise NotImplementedError

    def merge_data(self, a: Any, b: Any) -> Any:
        """Data summarising the elements of both `a` and `b`."""
        return a

    def deadline(self, data: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """(watermark, processing time) at which the leaf becomes ready by time alone."""
        return NO_WAKEUP

    def rewinds(self, ctx: TriggerContext) -> bool:
        """True when a Done leaf comes back after a merge into ctx.window."""
        return False

    # the algebra for leaves

    def initial_state(self) -> LeafState:
        """`(False, initial_data())`."""
        return (False, self.initial_data())

    def is_done(self, state: LeafState) -> bool:
        """True for the Done tombstone."""
        return state[0]

    def ready(self, state: LeafState, ctx: TriggerContext) -> bool:
        """P_Done = True; otherwise the leaf's predicate."""
        return state[0] or self.is_ready(state[1], ctx)

    def on_element(self, state: LeafState, timestamp_us: int, ctx: TriggerContext) -> LeafState:
        """Done leaves are not updated."""
        if state[0]:
            return state
        return (False, self.add_element(state[1], timestamp_us, ctx))

    def next(self, state: LeafState, ctx: TriggerContext) -> LeafState:
        """next(leaf) = Done(leaf)."""
        return _DONE

    def restart(self, state: LeafState) -> LeafState:
        """restart(Done(leaf)) = leaf with fresh data; a live leaf is unchanged."""
        return self.initial_state() if state[0] else state

    def reset(self, state: LeafState) -> LeafState:
        """A live leaf with fresh data."""
        return (False, self.initial_data())

    def rewind(self, state: LeafState, ctx: TriggerContext) -> LeafState:
        """Done(EndOfWindow) comes back while the merged window's end is ahead; others stay."""
        if state[0] and self.rewinds(ctx):
            return self.initial_state()
        return state

    def further(self, a: LeafState, b: LeafState) -> LeafState:
        """Done wins; otherwise the data merge."""
        if a[0]:
            return a
        if b[0]:
            return b
        return (False, self.merge_data(a[1], b[1]))

    def wakeup(self, state: LeafState, ctx: TriggerContext) -> Tuple[int, int]:
        """The leaf's deadline when not done and not yet reached."""
        if state[0]:
            return NO_WAKEUP
        wm, pt = self.deadline(state[1], ctx)
        return (wm if wm > ctx.input_watermark_us else MAX_TIMESTAMP_MICROS,
                pt if pt > ctx.processing_time_us else MAX_TIMESTAMP_MICROS)

    def is_once(self) -> bool:
        """Leaves fire once."""
        return True

    def current(self, state: LeafState) -> TriggerFn:
        """`Done(self)` for the tombstone."""
        return Done(self) if state[0] else self

    def _key(self) -> Tuple[Any, ...]:
        return ()

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other._key() == self._key()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._key()))


class ElemCount(LeafTrigger):
    """Ready once at least `count` elements arrived since the trigger last fired (the spec's ElemCount(k))."""

    processing_time_free = True

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise InvalidArgumentError(
                f"{type(self).__name__}(count) needs a positive int count of elements, got {count!r}")
        self.count = count

    def initial_data(self) -> int:
        """No elements: 0."""
        return 0

    def add_element(self, data: int, timestamp_us: int, ctx: TriggerContext) -> int:
        """One more element."""
        return data + 1

    def is_ready(self, data: int, ctx: TriggerContext) -> bool:
        """n >= k."""
        return data >= self.count

    def merge_data(self, a: int, b: int) -> int:
        """Counts add."""
        return a + b

    def _key(self) -> Tuple[int]:
        return (self.count,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.count})"


class EndOfWindow(LeafTrigger):
    """Ready once the input watermark passes the end of the window (the spec's EndOfWindow)."""

    watermark_only = True
    processing_time_free = True

    def __init__(self) -> None:
        pass

    @property
    def blind_before_end_of_window(self) -> bool:
        """Yes: only the watermark makes it ready."""
        return True

    @property
    def finishes_at_end_of_window(self) -> bool:
        """Yes: it fires once, at the end of the window."""
        return True

    def is_ready(self, data: Any, ctx: TriggerContext) -> bool:
        """t >= end of window."""
        return ctx.input_watermark_us >= ctx.window.end_us

    def deadline(self, data: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """The end of the window, in event time."""
        return (ctx.window.end_us, MAX_TIMESTAMP_MICROS)

    def rewinds(self, ctx: TriggerContext) -> bool:
        """A Done EndOfWindow comes back when the merged window ends after the watermark."""
        return ctx.input_watermark_us < ctx.window.end_us

    def __repr__(self) -> str:
        return "EndOfWindow()"


class _ProcessingTimeLeaf(LeafTrigger):
    """A leaf whose data is the arrival processing time of the earliest element since it last fired."""

    def add_element(self, data: Optional[int], timestamp_us: int, ctx: TriggerContext) -> int:
        """The earliest arrival."""
        t = ctx.processing_time_us
        return t if data is None or t < data else data

    def merge_data(self, a: Optional[int], b: Optional[int]) -> Optional[int]:
        """The earlier arrival."""
        if a is None:
            return b
        if b is None:
            return a
        return a if a < b else b

    @abstractmethod
    def fire_time_us(self, first_arrival_us: int) -> int:
        """The processing time at which the leaf is ready, given the earliest arrival."""
        raise NotImplementedError

    def is_ready(self, data: Optional[int], ctx: TriggerContext) -> bool:
        """Processing time has reached the fire time."""
        return data is not None and ctx.processing_time_us >= self.fire_time_us(data)

    def deadline(self, data: Optional[int], ctx: TriggerContext) -> Tuple[int, int]:
        """The fire time, in processing time."""
        if data is None:
            return NO_WAKEUP
        return (MAX_TIMESTAMP_MICROS, self.fire_time_us(data))


class SinceEarliestElem(_ProcessingTimeLeaf):
    """Ready `delay` of processing time after the earliest element arrived (SinceEarliestElem(Δ))."""

    def __init__(self, delay: Any = 0) -> None:
        try:
            self.delay_us = duration_micros(delay)
        except TypeError:
            raise InvalidArgumentError(
                f"{type(self).__name__}(delay) needs seconds or a Duration, got {delay!r}") from None
        if self.delay_us < 0:
            raise InvalidArgumentError(f"{type(self).__name__}(delay) must not be negative, got {delay!r}")

    @property
    def blind_before_end_of_window(self) -> bool:
        """Yes with a positive delay (a delay of zero is ready on an element's arrival)."""
        return self.delay_us > 0

    def fire_time_us(self, first_arrival_us: int) -> int:
        """First arrival plus the delay."""
        return first_arrival_us + self.delay_us

    def _key(self) -> Tuple[int]:
        return (self.delay_us,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({_seconds(self.delay_us)})"


class AtPeriod(_ProcessingTimeLeaf):
    """The paper's AtPeriod(period, offset): fires at the aligned processing-time boundary after arrivals.

    Boundaries are `offset + n * period`; an element arriving exactly on one is ready at once
    (Beam Java's `alignedTo`).
    """

    def __init__(self, period: Any, offset: Any = 0) -> None:
        try:
            self.period_us = duration_micros(period)
            self.offset_us = to_micros(offset)
        except TypeError:
            raise InvalidArgumentError(
                f"AtPeriod(period, offset) needs seconds (or a Duration / Timestamp), got "
                f"{period!r}, {offset!r}") from None
        if self.period_us <= 0:
            raise InvalidArgumentError(f"AtPeriod(period) must be positive, got {period!r}")

    def fire_time_us(self, first_arrival_us: int) -> int:
        """The first boundary at or after the earliest arrival."""
        since = (first_arrival_us - self.offset_us) % self.period_us
        return first_arrival_us if since == 0 else first_arrival_us + self.period_us - since

    def _key(self) -> Tuple[int, int]:
        return (self.period_us, self.offset_us)

    def __repr__(self) -> str:
        off = f", {_seconds(self.offset_us)}" if self.offset_us else ""
        return f"AtPeriod({_seconds(self.period_us)}{off})"


class Never(LeafTrigger):
    """Never ready; a window's data is released only by the final pane at garbage collection."""

    watermark_only = True
    processing_time_free = True

    def __init__(self) -> None:
        pass

    @property
    def blind_before_end_of_window(self) -> bool:
        """Yes: it is never ready."""
        return True

    def is_ready(self, data: Any, ctx: TriggerContext) -> bool:
        """Never."""
        return False

    def __repr__(self) -> str:
        return "Never()"


class Done(TriggerFn):
    """The spec's Done(leaf) tombstone as a trigger value: the leaf, already finished."""

    def __init__(self, leaf: LeafTrigger) -> None:
        if not isinstance(leaf, LeafTrigger):
            raise InvalidArgumentError(
                f"Done(...) wraps a leaf trigger (ElemCount, EndOfWindow, SinceEarliestElem, "
                f"AtPeriod, Never or a LeafTrigger subclass), got {leaf!r}")
        self.leaf = leaf
        self.watermark_only = leaf.watermark_only
        self.processing_time_free = leaf.processing_time_free

    def initial_state(self) -> Any:
        """The tombstone."""
        return _DONE

    def is_done(self, state: Any) -> bool:
        """As the leaf's state says (restart can lift the tombstone)."""
        return self.leaf.is_done(state)

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """As the leaf."""
        return self.leaf.ready(state, ctx)

    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """As the leaf."""
        return self.leaf.on_element(state, timestamp_us, ctx)

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """As the leaf."""
        return _DONE

    def restart(self, state: Any) -> Any:
        """restart(Done(R)) = R."""
        return self.leaf.restart(state)

    def reset(self, state: Any) -> Any:
        """The live leaf, fresh (restart(Done(R)) = R)."""
        return self.leaf.reset(state)

    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """As the leaf."""
        return self.leaf.rewind(state, ctx)

    def further(self, a: Any, b: Any) -> Any:
        """As the leaf."""
        return self.leaf.further(a, b)

    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """As the leaf."""
        return self.leaf.wakeup(state, ctx)

    def is_once(self) -> bool:
        """A Done leaf is a OnceTrigger."""
        return True

    def current(self, state: Any) -> TriggerFn:
        """Done(leaf) or, restarted, the leaf."""
        return self.leaf.current(state)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Done) and other.leaf == self.leaf

    def __hash__(self) -> int:
        return hash(("Done", self.leaf))

    def __repr__(self) -> str:
        return f"Done({self.leaf!r})"


# ---------------------------------------------------------------------------------------
# composites


class _Composite(TriggerFn):
    """A trigger over subtriggers; its state is the tuple of their states."""

    _needs_once = False
    _name = ""

    def __init__(self, *triggers: TriggerFn) -> None:
        name = self._name or type(self).__name__
        if len(triggers) == 1 and isinstance(triggers[0], (list, tuple)):
            triggers = tuple(triggers[0])
        if not triggers:
            raise InvalidArgumentError(f"{name}(...) needs at least one subtrigger")
        for t in triggers:
            if not isinstance(t, TriggerFn):
                raise InvalidArgumentError(
                    f"{name}(...) takes triggers such as AfterCount(2) or AfterWatermark(), got "
                    f"{type(t).__name__} {t!r}")
            if self._needs_once and not t.is_once():
                raise InvalidArgumentError(
                    f"{name}(...) takes only triggers that fire once (leaf triggers, "
                    f"AfterAny/AfterAll of them), but {t!r} can fire repeatedly; the trigger "
                    "spec's grammar forbids this: put the repetition outside, e.g. "
                    f"Repeatedly({name}(...))")
        self.triggers: Tuple[TriggerFn, ...] = tuple(triggers)
        self.watermark_only = all(t.watermark_only for t in self.triggers)
        self.processing_time_free = all(t.processing_time_free for t in self.triggers)

    @property
    def blind_before_end_of_window(self) -> bool:
        """Every subtrigger is (AfterFirst, AfterAll, Repeat, OrFinally; AfterEach refines it)."""
        return all(t.blind_before_end_of_window for t in self.triggers)

    def initial_state(self) -> Any:
        """Every child's initial state."""
        return tuple([t.initial_state() for t in self.triggers])

    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """Every child sees the element (Done leaves ignore it)."""
        return tuple([t.on_element(s, timestamp_us, ctx) for t, s in zip(self.triggers, state)])

    def restart(self, state: Any) -> Any:
        """Restart every child."""
        return tuple(t.restart(s) for t, s in zip(self.triggers, state))

    def reset(self, state: Any) -> Any:
        """Reset every child."""
        return tuple(t.reset(s) for t, s in zip(self.triggers, state))

    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """Rewind every child."""
        return tuple(t.rewind(s, ctx) for t, s in zip(self.triggers, state))

    def further(self, a: Any, b: Any) -> Any:
        """Child by child."""
        return tuple(t.further(x, y) for t, x, y in zip(self.triggers, a, b))

    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """The earliest wakeup of the children that are not done."""
        best = NO_WAKEUP
        for t, s in zip(self.triggers, state):
            if not t.is_done(s):
                best = _earliest(best, t.wakeup(s, ctx))
        return best

    def current(self, state: Any) -> TriggerFn:
        """The same composite over the children's current triggers."""
        return self._over(tuple(t.current(s) for t, s in zip(self.triggers, state)))

    def lowered(self) -> TriggerFn:
        """The same composite over the children lowered (itself when none changes)."""
        children = tuple(t.lowered() for t in self.triggers)
        if all(a is b for a, b in zip(children, self.triggers)):
            return self
        return self._over(children)

    def _over(self, children: Tuple[TriggerFn, ...]) -> TriggerFn:
        """A copy of this composite over `children` (the grammar's checks already passed)."""
        out = object.__new__(type(self))
        out.__dict__.update(self.__dict__)
        out.triggers = children
        return out

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.triggers == self.triggers

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.triggers))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self.triggers))})"


class AfterFirst(_Composite):
    """Ready when any subtrigger is ready, then done (the spec's AfterFirst; Beam's AfterAny)."""

    _needs_once = True

    def is_done(self, state: Any) -> bool:
        """Any child done."""
        return any(t.is_done(s) for t, s in zip(self.triggers, state))

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """Any child ready."""
        return any(t.ready(s, ctx) for t, s in zip(self.triggers, state))

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """next_if_ready of every child."""
        return tuple(t.next_if_ready(s, ctx) for t, s in zip(self.triggers, state))

    def is_once(self) -> bool:
        """A OnceTrigger."""
        return True


class AfterAll(_Composite):
    """Ready when every subtrigger is ready, then done (the spec's and Beam's AfterAll)."""

    _needs_once = True

    def is_done(self, state: Any) -> bool:
        """All children done."""
        return all(t.is_done(s) for t, s in zip(self.triggers, state))

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """All children ready."""
        return all(t.ready(s, ctx) for t, s in zip(self.triggers, state))

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """next of every child."""
        return tuple(t.next(s, ctx) for t, s in zip(self.triggers, state))

    def is_once(self) -> bool:
        """A OnceTrigger."""
        return True


class AfterEach(_Composite):
    """Each subtrigger in turn: ready when the first unfinished one is (the spec's and Beam's AfterEach)."""

    @property
    def blind_before_end_of_window(self) -> bool:
        """When the first subtrigger finishes only at the end of the window, only it can be
        active before then; else every subtrigger must be blind."""
        first = self.triggers[0]
        if first.finishes_at_end_of_window:
            return first.blind_before_end_of_window
        return all(t.blind_before_end_of_window for t in self.triggers)

    def _active(self, state: Any) -> int:
        """The index of the first unfinished child (the number of children: none)."""
        i = 0
        for t in self.triggers:
            if not t.is_done(state[i]):
                return i
            i += 1
        return i

    def is_done(self, state: Any) -> bool:
        """All children done."""
        return self._active(state) == len(self.triggers)

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """The first unfinished child is ready."""
        i = self._active(state)
        return i < len(self.triggers) and self.triggers[i].ready(state[i], ctx)

    #: `ready` is False once every child is done, so a window fires exactly when it is ready
    fires = ready

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """Advance the first unfinished child; later ones start afresh (they saw only emitted elements)."""
        i = self._active(state)
        if i == len(self.triggers):
            return state
        ts = self.triggers
        return (state[:i] + (ts[i].next(state[i], ctx),)
                + tuple(t.reset(s) for t, s in zip(ts[i + 1:], state[i + 1:])))

    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """Rewind children in order up to the first one unfinished after rewinding; restart the rest.

        (Choosing that child after rewinding keeps rewind idempotent: a revived EndOfWindow
        becomes the active child again, so the children after it start over.)
        """
        out = []
        ts = self.triggers
        for k, (t, s) in enumerate(zip(ts, state)):
            r = t.rewind(s, ctx)
            out.append(r)
            if not t.is_done(r):
                out.extend(u.restart(x) for u, x in zip(ts[k + 1:], state[k + 1:]))
                break
        return tuple(out)

    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """The wakeup of the first unfinished child."""
        i = self._active(state)
        return NO_WAKEUP if i == len(self.triggers) else self.triggers[i].wakeup(state[i], ctx)


class Repeat(_Composite):
    """Fires whenever its subtrigger is ready, restarting it when it finishes (Repeat; Beam's Repeatedly)."""

    _name = "Repeat"

    def __init__(self, trigger: TriggerFn) -> None:
        super().__init__(trigger)

    @property
    def underlying(self) -> TriggerFn:
        """The repeated trigger."""
        return self.triggers[0]

    def initial_state(self) -> Any:
        """The child's initial state."""
        return self.triggers[0].initial_state()

    def is_done(self, state: Any) -> bool:
        """Never done."""
        return False

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """The child is ready."""
        return self.triggers[0].ready(state, ctx)

    #: never done, so a window fires exactly when it is ready
    fires = ready

    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """The child sees the element."""
        return self.triggers[0].on_element(state, timestamp_us, ctx)

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """next of the child; when that finishes it, Repeat(restart(child)) with its state cleared."""
        t = self.triggers[0]
        s = t.next(state, ctx)
        return t.reset(s) if t.is_done(s) else s

    def restart(self, state: Any) -> Any:
        """Restart the child."""
        return self.triggers[0].restart(state)

    def reset(self, state: Any) -> Any:
        """Reset the child."""
        return self.triggers[0].reset(state)

    def rewind(self, state: Any, ctx: TriggerContext) -> Any:
        """Rewind the child."""
        return self.triggers[0].rewind(state, ctx)

    def further(self, a: Any, b: Any) -> Any:
        """As the child."""
        return self.triggers[0].further(a, b)

    def wakeup(self, state: Any, ctx: TriggerContext) -> Tuple[int, int]:
        """As the child."""
        return self.triggers[0].wakeup(state, ctx)

    def current(self, state: Any) -> TriggerFn:
        """Repeat of the child's current trigger."""
        return Repeat(self.triggers[0].current(state))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.triggers[0]!r})"


class OrFinally(_Composite):
    """`main` until `until` fires, then done (the spec's R.orFinally(U); Beam's OrFinally).

    The two branches see different elements: `main`'s state is reset each time it fires,
    while `until` keeps summarising every element since the OrFinally started.
    """

    def __init__(self, main: TriggerFn, until: TriggerFn) -> None:
        if isinstance(until, TriggerFn) and not until.is_once():
            raise InvalidArgumentError(
                f"OrFinally(main, until) needs a trigger that fires once as `until` (a leaf "
                f"trigger, or AfterAny/AfterAll of them), got {until!r}")
        super().__init__(main, until)

    @property
    def finishes_at_end_of_window(self) -> bool:
        """It finishes when its main part or its `until` does: `until` must finish only at the
        end of the window, and the main part too unless it is a Repeat (which never finishes)."""
        main, until = self.triggers
        return until.finishes_at_end_of_window and (
            isinstance(main, Repeat) or main.finishes_at_end_of_window)

    @property
    def main(self) -> TriggerFn:
        """The trigger that fires until `until` does."""
        return self.triggers[0]

    @property
    def until(self) -> TriggerFn:
        """The finally trigger."""
        return self.triggers[1]

    def is_done(self, state: Any) -> bool:
        """Either branch done."""
        main, until = self.triggers
        return main.is_done(state[0]) or until.is_done(state[1])

    def ready(self, state: Any, ctx: TriggerContext) -> bool:
        """Either branch ready."""
        main, until = self.triggers
        return main.ready(state[0], ctx) or until.ready(state[1], ctx)

    def next(self, state: Any, ctx: TriggerContext) -> Any:
        """next_if_ready of both branches."""
        return (self.triggers[0].next_if_ready(state[0], ctx),
                self.triggers[1].next_if_ready(state[1], ctx))


def check_trigger(trigger: Any) -> TriggerFn:
    """Returns `trigger` if it is a trigger, else raises a clear error."""
    if isinstance(trigger, type) and issubclass(trigger, TriggerFn):
        raise InvalidArgumentError(
            f"trigger must be a trigger instance, got the class {trigger.__name__}; write "
            f"{trigger.__name__}(...)")
    if not isinstance(trigger, TriggerFn):
        raise InvalidArgumentError(
            f"trigger must be a trigger such as DefaultTrigger() or AfterWatermark(...), got "
            f"{type(trigger).__name__} {trigger!r}")
    return trigger
