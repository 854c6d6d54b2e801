"""Beam's type-hint decorators: `with_input_types` / `with_output_types` on functions, DoFn
classes and PTransform classes, and reading the hints of a callable back.

`@with_input_types(int)` declares the type of the element (the first argument of a function,
the element of a DoFn's `process`); further positional or keyword hints name the other
arguments (side inputs) and are kept but not checked. `@with_output_types(str)` declares the
type of each output element (for a FlatMap function or a DoFn, of each element it yields,
not of the iterable). Without decorators, the annotations of the function or of
`DoFn.process` are read the same way (`def f(x: int) -> str`; a DoFn's or FlatMap's return
annotation `Iterable[str]` gives `str`). A transform's `.with_input_types()` /
`.with_output_types()` take precedence over both.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any, Callable, Dict, Tuple, TypeVar

from headrace.typehints.typehints import element_type_of_iterable

T = TypeVar("T")

_ATTR = "_headrace_type_hints"


@dataclasses.dataclass(frozen=True)
class IOTypeHints:
    """The declared types of a callable: its element input type and output element type
    (None when undeclared), and the hints of its other arguments (not checked)."""

    input_type: Any = None
    output_type: Any = None
    side_input_types: Tuple[Tuple[Any, ...], Dict[str, Any]] = ((), {})


def _set(obj: T, **changes: Any) -> T:
    current = obj.__dict__.get(_ATTR) if hasattr(obj, "__dict__") else None
    hints = dataclasses.replace(current or IOTypeHints(), **changes)
    try:
        setattr(obj, _ATTR, hints)
    except (AttributeError, TypeError):
        raise TypeError(f"cannot attach type hints to {obj!r}: decorate a function, a DoFn class "
                        "or a PTransform class") from None
    return obj


def with_input_types(*positional_hints: Any, **keyword_hints: Any) -> Callable[[T], T]:
    """Declares the input types of a function, DoFn class or PTransform class: the first hint
    (positional, or the first keyword) is the element's type."""
    if not positional_hints and not keyword_hints:
        raise TypeError("with_input_types needs at least one type, e.g. @with_input_types(int)")

    def annotate(obj: T) -> T:
        if positional_hints:
            main, rest, kw = positional_hints[0], positional_hints[1:], dict(keyword_hints)
        else:
            first = next(iter(keyword_hints))
            main, rest = keyword_hints[first], ()
            kw = {k: v for k, v in keyword_hints.items() if k != first}
        return _set(obj, input_type=main, side_input_types=(tuple(rest), kw))
    return annotate


def with_output_types(*return_type_hint: Any, **kwargs: Any) -> Callable[[T], T]:
    """Declares the type of each output element of a function, DoFn class or PTransform class."""
    if len(return_type_hint) != 1 or kwargs:
        raise TypeError("with_output_types takes exactly one type, e.g. @with_output_types(str)")

    def annotate(obj: T) -> T:
        return _set(obj, output_type=return_type_hint[0])
    return annotate


def declared_hints(obj: Any) -> IOTypeHints:
    """The hints decorated on `obj` or on its class (empty IOTypeHints when none)."""
    hints = getattr(obj, _ATTR, None)
    return hints if isinstance(hints, IOTypeHints) else IOTypeHints()


def get_type_hints(fn: Any, yields: bool = False) -> IOTypeHints:
    """The hints of a function or DoFn: decorated ones first, else its annotations (for a
    DoFn, those of `process`). `yields`: the function returns an iterable of outputs, so a
    return annotation `Iterable[T]` means outputs of type T."""
    declared = declared_hints(fn)
    target: Any = None
    if inspect.isroutine(fn):
        target = fn
    elif callable(getattr(fn, "process", None)):
        target, yields = fn.process, True
    elif callable(fn) and not inspect.isclass(fn):
        target = fn.__call__
    annotated = _annotations(target, yields) if target is not None else IOTypeHints()
    return IOTypeHints(
        declared.input_type if declared.input_type is not None else annotated.input_type,
        declared.output_type if declared.output_type is not None else annotated.output_type,
        declared.side_input_types)


def _annotations(fn: Any, yields: bool) -> IOTypeHints:
    try:
        hints = typing.get_type_hints(fn)
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except Exception:  # unresolvable annotations, builtins without a signature: no hints
        return IOTypeHints()
    input_type = hints.get(params[0].name) if params else None
    output = hints.get("return")
    if yields and output is not None:
        output = element_type_of_iterable(output)
    return IOTypeHints(input_type, output)
