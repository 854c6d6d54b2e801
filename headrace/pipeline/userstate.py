"""User state and timers for DoFns (Beam's `apache_beam.transforms.userstate`, re-exported
there as `headrace.transforms.userstate`).

A DoFn applied to a keyed PCollection declares state cells and timers as specs and receives
them as parameters: `state=DoFn.StateParam(SPEC)`, `timer=DoFn.TimerParam(SPEC)`. State is per
key and window; a timer calls back the method decorated `@on_timer(SPEC)` in the key and
window it was set in. Event-time timers (`TimeDomain.WATERMARK`) fire once the input
watermark passes their time and hold the step's output watermark until then; processing-time
timers (`TimeDomain.REAL_TIME`) fire once processing time reaches theirs. When a window
expires (the watermark passes its end plus the allowed lateness) its state and timers are
dropped, after calling the method decorated `@on_window_expiration`, if any. See
docs/semantics.md, "Stateful DoFns".
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Optional, Set, Tuple, TypeVar

from headrace.errors import InvalidArgumentError
from headrace.model.combine import CombineFn

__all__ = [
    "BagStateSpec", "CombiningValueStateSpec", "MapStateSpec", "OrderedListStateSpec",
    "ReadModifyWriteStateSpec", "SetStateSpec", "StateSpec", "TimeDomain", "TimerSpec",
    "get_dofn_specs", "is_stateful_dofn", "on_timer", "on_window_expiration",
    "validate_stateful_dofn",
]

F = TypeVar("F", bound=Callable[..., Any])


class TimeDomain:
    """The time a timer is set in: event time (`WATERMARK`) or processing time (`REAL_TIME`)."""

    WATERMARK = "WATERMARK"
    REAL_TIME = "REAL_TIME"
    DEPENDENT_REAL_TIME = "DEPENDENT_REAL_TIME"

    _ALL = (WATERMARK, REAL_TIME, DEPENDENT_REAL_TIME)

    @staticmethod
    def from_string(domain: str) -> str:
        """The domain named `domain`, or ValueError."""
        if domain in TimeDomain._ALL:
            return domain
        raise ValueError(f"Unknown time domain: {domain!r}; use TimeDomain.WATERMARK or "
                         "TimeDomain.REAL_TIME")

    @staticmethod
    def is_event_time(domain: str) -> bool:
        """Whether `domain` is event time."""
        return TimeDomain.from_string(domain) == TimeDomain.WATERMARK


def _check_coder(kind: str, name: str, coder: Any) -> None:
    if coder is not None and not (callable(getattr(coder, "encode", None))
                                  and callable(getattr(coder, "decode", None))):
        raise InvalidArgumentError(
            f"{kind}({name!r}, coder=...) needs a coder instance with encode() and decode(), such "
            f"as headrace.coders.StrUtf8Coder(), or None; got {coder!r}")


class StateSpec:
    """A user state cell of a DoFn: its name (unique in the DoFn) and an optional coder."""

    def __init__(self, name: str, coder: Any = None) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(
                f"{type(self).__name__} needs a non-empty str name, got {name!r}")
        _check_coder(type(self).__name__, name, coder)
        self.name = name
        self.coder = coder

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name})"


class ReadModifyWriteStateSpec(StateSpec):
    """A single value: `read()` (None when empty), `write(value)`, `clear()`."""


class BagStateSpec(StateSpec):
    """A bag of values: `read()` (in the order added), `add(value)`, `clear()`."""


class SetStateSpec(StateSpec):
    """A set of (hashable) values: `read()`, `add(value)`, `clear()`."""


class OrderedListStateSpec(StateSpec):
    """(timestamp, value) pairs read in timestamp order: `read()`, `add((ts, value))`,
    `read_range(min, limit)`, `clear_range(min, limit)`, `clear()`."""


class CombiningValueStateSpec(StateSpec):
    """A value combined from what is added: `add(value)`, `read()` (the CombineFn's output),
    `clear()`. `CombiningValueStateSpec(name, combine_fn)` or `(name, coder, combine_fn)`; a
    callable over an iterable of values stands for a CombineFn (as in CombinePerKey)."""

    def __init__(self, name: str, coder: Any = None, combine_fn: Any = None) -> None:
        if combine_fn is None:
            if coder is None:
                raise InvalidArgumentError(
                    f"CombiningValueStateSpec({name!r}) needs a combine_fn, e.g. "
                    "CombiningValueStateSpec('count', sum) or (..., combiners.CountCombineFn())")
            coder, combine_fn = None, coder
        self.combine_fn = CombineFn.maybe_from_callable(combine_fn)
        super().__init__(name, coder)


class MapStateSpec(StateSpec):
    """A map from keys to values (headrace's addition, as Beam Java's MapState and Spark's
    MapState): `get(k, default)`, `put(k, v)`, `remove(k)`, `contains(k)`, `keys()`,
    `values()`, `items()`, `read()` (a dict), `is_empty()`, `clear()`."""

    def __init__(self, name: str, key_coder: Any = None, value_coder: Any = None) -> None:
        _check_coder("MapStateSpec", name, key_coder)
        super().__init__(name, value_coder)
        self.key_coder = key_coder


class TimerSpec:
    """A timer of a DoFn: its name and time domain; `@on_timer(spec)` marks its callback."""

    def __init__(self, name: str, time_domain: str) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"TimerSpec needs a non-empty str name, got {name!r}")
        if time_domain not in (TimeDomain.WATERMARK, TimeDomain.REAL_TIME):
            raise InvalidArgumentError(
                f"TimerSpec({name!r}, {time_domain!r}): unsupported time domain; use "
                "TimeDomain.WATERMARK (event time) or TimeDomain.REAL_TIME (processing time)")
        self.name = name
        self.time_domain = time_domain
        self._attached_callback: Optional[Callable[..., Any]] = None

    @property
    def is_event_time(self) -> bool:
        """Whether the timer is in event time (`TimeDomain.WATERMARK`)."""
        return self.time_domain == TimeDomain.WATERMARK

    def __repr__(self) -> str:
        return f"TimerSpec({self.name})"


def on_timer(timer_spec: TimerSpec) -> Callable[[F], F]:
    """Decorates the DoFn method called when the timer `timer_spec` fires."""
    if not isinstance(timer_spec, TimerSpec):
        raise InvalidArgumentError(f"@on_timer expects a TimerSpec, got {timer_spec!r}")

    def attach(method: F) -> F:
        if not callable(method):
            raise InvalidArgumentError(f"@on_timer({timer_spec!r}) decorates a method, got {method!r}")
        if timer_spec._attached_callback is not None:
            raise InvalidArgumentError(
                f"two @on_timer callbacks for {timer_spec!r} ({timer_spec._attached_callback.__name__} "
                f"and {method.__name__}); a timer has one callback")
        timer_spec._attached_callback = method
        return method

    return attach


def on_window_expiration(method: F) -> F:
    """Decorates the DoFn method called for each key and window with state when the window
    expires (the watermark passes its end plus the allowed lateness), before its state is
    dropped (Beam Java's `@OnWindowExpiration`)."""
    if not callable(method):
        raise InvalidArgumentError(f"@on_window_expiration decorates a method, got {method!r}")
    method._headrace_on_window_expiration = True  # type: ignore[attr-defined]
    return method


def _methods(dofn: Any) -> Any:
    for name in dir(type(dofn)):
        if name.startswith("__"):
            continue
        attr = getattr(type(dofn), name, None)
        if callable(attr):
            yield name, attr


def get_dofn_specs(dofn: Any) -> Tuple[Set[StateSpec], Set[TimerSpec]]:
    """The state and timer specs a DoFn's methods declare as parameters."""
    from headrace.pipeline.dofn import _StateDoFnParam, _TimerDoFnParam
    states: Set[StateSpec] = set()
    timers: Set[TimerSpec] = set()
    for _, method in _methods(dofn):
        try:
            params = inspect.signature(method).parameters.values()
        except (TypeError, ValueError):
            continue
        for p in (q.default for q in params):
            if isinstance(p, _StateDoFnParam):
                states.add(p.spec)
            elif isinstance(p, _TimerDoFnParam):
                timers.add(p.spec)
    return states, timers


def is_stateful_dofn(dofn: Any) -> bool:
    """Whether a DoFn uses user state or timers (or reacts to window expiration)."""
    states, timers = get_dofn_specs(dofn)
    return bool(states or timers) or window_expiration_method(dofn) is not None


def window_expiration_method(dofn: Any) -> Optional[str]:
    """The name of the DoFn's `@on_window_expiration` method, or None."""
    for name, method in _methods(dofn):
        if getattr(method, "_headrace_on_window_expiration", False):
            return name
    return None


def timer_callback_name(dofn: Any, spec: TimerSpec) -> str:
    """The name of the DoFn method that `@on_timer(spec)` decorates, or an error saying so."""
    cb = spec._attached_callback
    if cb is None:
        raise InvalidArgumentError(
            f"DoFn {type(dofn).__name__} uses {spec!r} but none of its methods is decorated "
            f"@on_timer with that spec; add one, e.g. @on_timer(SPEC) def on_{spec.name}(self): ...")
    name = cb.__name__
    if getattr(getattr(type(dofn), name, None), "__code__", None) is not getattr(cb, "__code__", 0):
        raise InvalidArgumentError(
            f"the @on_timer callback of {spec!r} is not the method {type(dofn).__name__}.{name} "
            "(was it overwritten?); give each timer callback its own method name")
    return name


def validate_stateful_dofn(dofn: Any) -> None:
    """Checks a stateful DoFn: unique state and timer names, a callback for every timer."""
    states, timers = get_dofn_specs(dofn)
    for kind, specs in (("state", states), ("timer", timers)):
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidArgumentError(
                f"DoFn {type(dofn).__name__} declares several {kind} specs named {dup}; give each "
                "its own name")
    for spec in timers:
        timer_callback_name(dofn, spec)
