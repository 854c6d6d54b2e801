"""Beam's type-hint names as `typing` forms, and the consistency check between two hints.

`Tuple`, `List`, `Dict`, `Set`, `FrozenSet`, `Iterable`, `Iterator`, `Any`, `Union` and
`Optional` are `typing`'s own, so plain `typing` hints and these mix freely. `KV[K, V]` is
`Tuple[K, V]`; `Generator[T]` (Beam's one-argument form) is `Iterator[T]`; `TypeVariable` is
`typing.TypeVar`.

`is_consistent_with(sub, base)` answers whether values of hint `sub` may be used where `base`
is expected. It is deliberately lenient: only what is certain counts as inconsistent (two
classes neither of which is the other's subclass, a tuple of the wrong length, a container of
the wrong kind, or such a mismatch inside containers); unknowns (`Any`, type variables,
forward references, protocols it cannot judge) are consistent with everything.
"""

from __future__ import annotations

import collections.abc
import typing
from typing import Any as _Any

Any = typing.Any
Union = typing.Union
Optional = typing.Optional
Tuple = typing.Tuple
List = typing.List
Dict = typing.Dict
Set = typing.Set
FrozenSet = typing.FrozenSet
Iterable = typing.Iterable
Iterator = typing.Iterator
TypeVariable = typing.TypeVar


class _Subscriptable:
    """A name whose subscript builds a `typing` form (`KV[K, V]`, `Generator[T]`)."""

    def __init__(self, name: str, build: typing.Callable[[_Any], _Any], doc: str) -> None:
        self._name, self._build = name, build
        self.__doc__ = doc

    def __getitem__(self, params: _Any) -> _Any:
        return self._build(params)

    def __repr__(self) -> str:
        return f"typehints.{self._name}"


def _kv(params: _Any) -> _Any:
    if not isinstance(params, tuple) or len(params) != 2:
        raise TypeError(f"KV[K, V] takes two types, got KV[{params!r}]")
    return typing.Tuple[params[0], params[1]]


#: `KV[K, V]`: a key-value pair, the same hint as `Tuple[K, V]`.
KV = _Subscriptable("KV", _kv, "KV[K, V]: a (key, value) pair, the same hint as Tuple[K, V].")
#: `Generator[T]`: what a generator function yields, the same hint as `Iterator[T]`.
Generator = _Subscriptable("Generator", lambda t: typing.Iterator[t],  # type: ignore[valid-type]
                           "Generator[T]: values of type T yielded one by one (Iterator[T]).")

_NUMERIC = {int: (float, complex), float: (complex,)}
_TUPLE_LIKE = (tuple, list)  # a list may stand for a tuple (e.g. a pair): not certain either way


def _unknown(t: _Any) -> bool:
    return (t is None or t is typing.Any or t is object or isinstance(t, (typing.TypeVar, str))
            or isinstance(t, typing.ForwardRef))


def _origin(t: _Any) -> _Any:
    """The class behind a hint (`list` for `List[int]`), or None when it has none."""
    if isinstance(t, type):
        return t
    o = typing.get_origin(t)
    return o if isinstance(o, type) else None


def is_consistent_with(sub: _Any, base: _Any) -> bool:
    """Whether values of hint `sub` may be used where hint `base` is expected (see module doc)."""
    if _unknown(sub) or _unknown(base) or sub == base:
        return True
    if typing.get_origin(base) is typing.Union:
        return any(is_consistent_with(sub, b) for b in typing.get_args(base))
    if typing.get_origin(sub) is typing.Union:
        return any(is_consistent_with(s, base) for s in typing.get_args(sub))
    so, bo = _origin(sub), _origin(base)
    if so is None or bo is None:
        return True
    if not _subclass(so, bo):
        return False
    return _args_consistent(sub, base, so, bo)


def _subclass(so: type, bo: type) -> bool:
    if bo in _NUMERIC.get(so, ()):
        return True
    if bo is tuple and so is list:
        return True
    try:
        return issubclass(so, bo)
    except TypeError:
        return True


def _args_consistent(sub: _Any, base: _Any, so: type, bo: type) -> bool:
    sa, ba = typing.get_args(sub), typing.get_args(base)
    if not sa or not ba:
        return True
    if bo is tuple and so is tuple:
        if len(ba) == 2 and ba[1] is Ellipsis:
            items = sa[:1] if len(sa) == 2 and sa[1] is Ellipsis else sa
            return all(is_consistent_with(s, ba[0]) for s in items)
        if len(sa) == 2 and sa[1] is Ellipsis:
            return all(is_consistent_with(sa[0], b) for b in ba)
        return len(sa) == len(ba) and all(is_consistent_with(s, b) for s, b in zip(sa, ba))
    if issubclass(bo, collections.abc.Mapping):
        if len(sa) == 2 and len(ba) == 2:
            return all(is_consistent_with(s, b) for s, b in zip(sa, ba))
        return True
    if len(ba) == 1 and issubclass(bo, collections.abc.Iterable):
        items = sa[:1] if so is not tuple or (len(sa) == 2 and sa[1] is Ellipsis) else sa
        return all(is_consistent_with(s, ba[0]) for s in items if s is not Ellipsis)
    return True


def element_type_of_iterable(hint: _Any) -> _Any:
    """T for an iterable hint such as `Iterable[T]`, `List[T]` or `Iterator[T]`; else None."""
    o = _origin(hint)
    args = typing.get_args(hint)
    if o is None or not args or not issubclass(o, collections.abc.Iterable) or o in (str, bytes):
        return None
    if o is tuple:
        return args[0] if len(args) == 2 and args[1] is Ellipsis else None
    if issubclass(o, collections.abc.Mapping):
        return args[0]
    return args[0]


def type_name(hint: _Any) -> str:
    """A short readable name of a hint: `int`, `Tuple[str, int]`."""
    if isinstance(hint, type) and typing.get_origin(hint) is None:
        return hint.__qualname__ if hint.__module__ == "builtins" else \
            f"{hint.__module__}.{hint.__qualname__}"
    return repr(hint).replace("typing.", "")
