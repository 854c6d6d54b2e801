"""A PCollection's windowing strategy: `Windowing` and its options.

`Windowing` bundles the window function (`headrace.model.window`), the trigger
(`headrace.model.triggers`) and the options defined here: `AccumulationMode`,
`ClosingBehavior` and `OnTimeBehavior` say which panes the per-key core
(`headrace.model.reduce`) emits for a window and what they hold, next to the trigger that says
when; `TimestampCombiner` says which timestamp a pane carries. `check_accumulation_mode` and
`check_enum` check them as arguments.

This module sits above windows and triggers: it imports both, and neither imports it, so the
model's modules import one another without a circle (tests/test_architecture.py).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Optional

from headrace.errors import InvalidArgumentError
from headrace.model.time import duration_micros
from headrace.model.triggers.algebra import TriggerFn, check_trigger
from headrace.model.triggers.sugar import DefaultTrigger
from headrace.model.window import GlobalWindows, WindowFn, _fmt


class AccumulationMode(enum.Enum):
    """How successive panes of a window relate: discarding, accumulating, or accumulating and retracting."""

    DISCARDING = 1
    ACCUMULATING = 2
    ACCUMULATING_AND_RETRACTING = 3


class ClosingBehavior(enum.Enum):
    """Whether the final pane at garbage collection is emitted when empty (Beam Java's ClosingBehavior)."""

    FIRE_IF_NON_EMPTY = 1
    FIRE_ALWAYS = 2


class OnTimeBehavior(enum.Enum):
    """Whether an ON_TIME pane is emitted when it has no new elements (Beam Java's OnTimeBehavior)."""

    FIRE_ALWAYS = 1
    FIRE_IF_NON_EMPTY = 2


class TimestampCombiner(enum.Enum):
    """How the output timestamp of a grouped pane is chosen from its inputs."""

    OUTPUT_AT_EOW = "OUTPUT_AT_EOW"
    OUTPUT_AT_EARLIEST = "OUTPUT_AT_EARLIEST"
    OUTPUT_AT_LATEST = "OUTPUT_AT_LATEST"
    OUTPUT_AT_EARLIEST_TRANSFORMED = "OUTPUT_AT_EARLIEST_TRANSFORMED"


def check_accumulation_mode(mode: Any) -> AccumulationMode:
    """Returns `mode` if it is an AccumulationMode, else raises a clear error."""
    if not isinstance(mode, AccumulationMode):
        raise InvalidArgumentError(
            f"accumulation_mode must be AccumulationMode.DISCARDING, ACCUMULATING or "
            f"ACCUMULATING_AND_RETRACTING, got {mode!r}")
    return mode


def check_enum(name: str, value: Any, default: enum.Enum) -> Any:
    """`value` if it is a member of `default`'s enum (None gives `default`), else a clear error."""
    if value is None:
        return default
    cls = type(default)
    if not isinstance(value, cls):
        raise InvalidArgumentError(
            f"{name} must be one of {', '.join(f'{cls.__name__}.{m.name}' for m in cls)}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True, init=False, repr=False, eq=False)
class Windowing:
    """A PCollection's windowing strategy: window function, trigger, accumulation, lateness, timestamps.

    An immutable value: a frozen dataclass whose constructor validates and normalises its
    arguments (Beam's spellings: `allowed_lateness` in seconds or a Duration, None for the
    defaults). Equality is identity (`eq=False`): two strategies built alike are still two.
    """

    windowfn: WindowFn
    trigger: TriggerFn
    accumulation_mode: AccumulationMode
    timestamp_combiner: TimestampCombiner
    allowed_lateness_us: int
    closing_behavior: ClosingBehavior
    on_time_behavior: OnTimeBehavior
    _explicit_trigger: bool

    def __init__(self, windowfn: WindowFn, trigger: Any = None, accumulation_mode: Any = None,
                 timestamp_combiner: Optional[TimestampCombiner] = None,
                 allowed_lateness: Any = 0, closing_behavior: Any = None,
                 on_time_behavior: Any = None) -> None:
        if not isinstance(windowfn, WindowFn):
            raise InvalidArgumentError(
                f"a windowing strategy needs a WindowFn (FixedWindows, SlidingWindows, Sessions, "
                f"GlobalWindows or a WindowFn subclass), got {type(windowfn).__name__} {windowfn!r}")
        checked_trigger = DefaultTrigger() if trigger is None else check_trigger(trigger)
        mode = (AccumulationMode.DISCARDING if accumulation_mode is None
                else check_accumulation_mode(accumulation_mode))
        if timestamp_combiner is None:
            timestamp_combiner = TimestampCombiner.OUTPUT_AT_EOW
        if not isinstance(timestamp_combiner, TimestampCombiner):
            raise InvalidArgumentError(
                f"timestamp_combiner must be a TimestampCombiner (e.g. "
                f"TimestampCombiner.OUTPUT_AT_EOW), got {timestamp_combiner!r}")
        try:
            lateness = duration_micros(allowed_lateness)
        except TypeError:
            raise InvalidArgumentError(
                f"allowed_lateness must be seconds or a Duration, got {allowed_lateness!r}") from None
        if lateness < 0:
            raise InvalidArgumentError(f"allowed_lateness must not be negative, got {allowed_lateness!r}")
        closing = check_enum("closing_behavior", closing_behavior, ClosingBehavior.FIRE_IF_NON_EMPTY)
        on_time = check_enum("on_time_behavior", on_time_behavior, OnTimeBehavior.FIRE_ALWAYS)
        init = object.__setattr__  # frozen: the fields are set through object
        init(self, "windowfn", windowfn)
        init(self, "trigger", checked_trigger)
        init(self, "accumulation_mode", mode)
        init(self, "timestamp_combiner", timestamp_combiner)
        init(self, "allowed_lateness_us", lateness)
        init(self, "closing_behavior", closing)
        init(self, "on_time_behavior", on_time)
        init(self, "_explicit_trigger", trigger is not None)

    def is_default(self) -> bool:
        """True for global windows with the default trigger and settings."""
        return (isinstance(self.windowfn, GlobalWindows) and not self._explicit_trigger
                and self.allowed_lateness_us == 0)

    def __repr__(self) -> str:
        return (f"Windowing({self.windowfn!r}, trigger={self.trigger!r}, "
                f"accumulation_mode={self.accumulation_mode!r}, "
                f"timestamp_combiner={self.timestamp_combiner.name}, "
                f"allowed_lateness={_fmt(self.allowed_lateness_us)}s)")
