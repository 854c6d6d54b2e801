"""Triggers and accumulation modes.

A trigger is an immutable *spec*; its per-window *state* is plain data held by the per-key
core (`headrace.model.reduce`). The core asks a trigger four things: the state of a fresh
window, how an element changes it, whether it is ready at a given input watermark, and the
state after it fired (with whether it has finished). This module holds the default trigger;
the formal trigger algebra of seed 000 plugs into the same interface.
"""

from __future__ import annotations

import enum
from typing import Any, Iterable, Tuple

from headrace.errors import InvalidArgumentError


class AccumulationMode(enum.Enum):
    """How successive panes of a window relate: discarding, accumulating, or accumulating and retracting."""

    DISCARDING = 1
    ACCUMULATING = 2
    ACCUMULATING_AND_RETRACTING = 3


class TriggerContext:
    """What a trigger sees when asked: the window, the input watermark and the processing time."""

    __slots__ = ("window", "input_watermark_us", "processing_time_us")

    def __init__(self, window: Any, input_watermark_us: int, processing_time_us: int) -> None:
        self.window = window
        self.input_watermark_us = input_watermark_us
        self.processing_time_us = processing_time_us


class TriggerFn:
    """Base class of triggers: an immutable spec whose per-window state is plain data."""

    #: True when the trigger looks only at the watermark (no element or processing-time state),
    #: which lets the core skip per-element trigger bookkeeping.
    watermark_only = False

    def initial_state(self) -> Any:
        """The state of a window no element has reached yet."""
        return None

    def on_element(self, state: Any, timestamp_us: int, ctx: TriggerContext) -> Any:
        """The state after one more element (with event timestamp `timestamp_us`) arrived."""
        return state

    def should_fire(self, state: Any, ctx: TriggerContext) -> bool:
        """True when the window should emit a pane now."""
        raise NotImplementedError

    def on_fire(self, state: Any, ctx: TriggerContext) -> Tuple[Any, bool]:
        """The state after firing, and whether the trigger has finished for this window."""
        raise NotImplementedError

    def merge_states(self, states: Iterable[Any], ctx: TriggerContext) -> Any:
        """The state of a window merged from windows with these states."""
        return None

    def may_lose_data(self) -> bool:
        """True when the trigger can finish while data may still arrive."""
        return False


class DefaultTrigger(TriggerFn):
    """Fires once when the watermark passes the end of the window, then once per batch of late data."""

    watermark_only = True

    def should_fire(self, state: Any, ctx: TriggerContext) -> bool:
        """Ready once the input watermark has reached the end of the window."""
        return ctx.input_watermark_us >= ctx.window.end_us

    def on_fire(self, state: Any, ctx: TriggerContext) -> Tuple[Any, bool]:
        """Never finishes: every later pane is a late refinement."""
        return None, False

    def __eq__(self, other: object) -> bool:
        return type(other) is DefaultTrigger

    def __hash__(self) -> int:
        return hash(DefaultTrigger)

    def __repr__(self) -> str:
        return "DefaultTrigger()"


def check_trigger(trigger: Any) -> TriggerFn:
    """Returns `trigger` if it is a trigger, else raises a clear error."""
    if not isinstance(trigger, TriggerFn):
        raise InvalidArgumentError(
            f"trigger must be a trigger such as DefaultTrigger() or AfterWatermark(...), got "
            f"{type(trigger).__name__} {trigger!r}")
    return trigger


def check_accumulation_mode(mode: Any) -> AccumulationMode:
    """Returns `mode` if it is an AccumulationMode, else raises a clear error."""
    if not isinstance(mode, AccumulationMode):
        raise InvalidArgumentError(
            f"accumulation_mode must be AccumulationMode.DISCARDING, ACCUMULATING or "
            f"ACCUMULATING_AND_RETRACTING, got {mode!r}")
    return mode
