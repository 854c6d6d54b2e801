"""The pane options of a windowing strategy: AccumulationMode, ClosingBehavior, OnTimeBehavior.

These enums say which panes the per-key core (`headrace.model.reduce`) emits for a window
and what they hold, next to the trigger that says when; `Windowing` (in `model/window.py`)
carries them, checked by `check_accumulation_mode` and `check_enum`.
"""

from __future__ import annotations

import enum
from typing import Any

from headrace.errors import InvalidArgumentError


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
