"""Beam's coder registry: which coder a type hint gets, and coders registered for user classes.

`registry.get_coder(hint)` maps a type hint (a class, or a `typing` form such as
`Tuple[str, int]`, `List[int]`, `Dict[str, float]`, `Optional[str]`; `headrace.typehints`
gives the same forms under Beam's names) to a coder: int VarIntCoder, float FloatCoder,
bytes BytesCoder, bool BooleanCoder, str StrUtf8Coder, tuples TupleCoder (or
TupleSequenceCoder for `Tuple[T, ...]`), lists ListCoder, other iterables IterableCoder,
dicts MapCoder, `Optional[T]` NullableCoder, a registered class its registered coder, and
anything else (Any, unknown classes, unions) the fallback FastPrimitivesCoder.

`registry.register_coder(cls, CoderClass)` registers a user's coder. Besides choosing coders
by type hint, a registered coder that is deterministic (or can be made so,
`as_deterministic_coder`) is what lets instances of `cls` be grouping keys
(`model.coders.encode_key` uses its bytes); keys of a class whose coder cannot be made
deterministic are refused with the coder's reason.
"""

from __future__ import annotations

import collections.abc
import typing
from typing import Any, Dict, Iterable, List, Optional, Tuple, Type

from headrace.model import element_coders as ec


class CoderRegistry:
    """A registry of type-hint / coder associations (Beam's `coders.registry` is one)."""

    def __init__(self, fallback_coder: Optional[Any] = None) -> None:
        self._coders: Dict[Any, Type[ec.Coder]] = {}
        self.custom_types: List[Any] = []
        self._key_coders: Dict[type, Tuple[Optional[ec.Coder], str]] = {}
        self.register_standard_coders(fallback_coder)

    def register_standard_coders(self, fallback_coder: Optional[Any]) -> None:
        """Registers the coders of the basic types and the fallback coder."""
        for t, c in ((int, ec.VarIntCoder), (float, ec.FloatCoder), (bytes, ec.BytesCoder),
                     (bool, ec.BooleanCoder), (str, ec.StrUtf8Coder)):
            self._coders[t] = c
        self._fallback_coder: Any = fallback_coder or ec.FastPrimitivesCoder

    def register_fallback_coder(self, fallback_coder: Any) -> None:
        """Uses `fallback_coder` (a coder class, or anything with `from_type_hint`) for the
        hints no registered coder matches."""
        self._fallback_coder = fallback_coder

    def register_coder(self, typehint_type: Any, typehint_coder_class: Type[ec.Coder]) -> None:
        """Uses `typehint_coder_class()` (its `from_type_hint`) for `typehint_type`, also for
        grouping keys of that type (see the module doc)."""
        if not isinstance(typehint_coder_class, type):
            raise TypeError(
                "Coder registration requires a coder class object. Received "
                f"{typehint_coder_class!r} instead: pass the class, e.g. "
                f"register_coder({getattr(typehint_type, '__name__', typehint_type)}, "
                f"{type(typehint_coder_class).__name__})")
        if typehint_type not in self.custom_types:
            self.custom_types.append(typehint_type)
        self._coders[typehint_type] = typehint_coder_class
        self._key_coders.clear()

    def get_coder(self, typehint: Any) -> ec.Coder:
        """The coder for values of the type hint `typehint` (see the module doc)."""
        registered = self._coders.get(typehint) if _hashable(typehint) else None
        if registered is not None:
            return registered.from_type_hint(typehint, self)
        origin = typing.get_origin(typehint)
        args = typing.get_args(typehint)
        if origin is tuple and args:
            if len(args) == 2 and args[1] is Ellipsis:
                return ec.TupleSequenceCoder.from_type_hint(typehint, self)
            if Ellipsis not in args:
                return ec.TupleCoder.from_type_hint(typehint, self)
        if origin is list:
            return ec.ListCoder.from_type_hint(typehint, self)
        if origin is dict:
            return ec.MapCoder.from_type_hint(typehint, self)
        if origin in (collections.abc.Iterable, collections.abc.Collection, collections.abc.Sequence):
            return ec.IterableCoder.from_type_hint(typehint, self)
        if origin is typing.Union and len(args) == 2 and type(None) in args:
            inner = args[0] if args[1] is type(None) else args[1]
            return ec.NullableCoder(self.get_coder(inner))
        coder: ec.Coder = self._fallback_coder.from_type_hint(typehint, self)
        return coder

    def get_custom_type_coder_tuples(self, types: Iterable[Any]) -> List[Tuple[Any, Type[ec.Coder]]]:
        """(type, coder class) for each of `types` that has a registered coder."""
        return [(t, self._coders[t]) for t in types if t in self.custom_types]

    def verify_deterministic(self, key_coder: ec.Coder, op_name: str, silent: bool = True) -> ec.Coder:
        """`key_coder` if deterministic, else its deterministic version, else ValueError
        saying that the key coder of `op_name` is not deterministic and how to fix it."""
        if key_coder.is_deterministic():
            return key_coder
        error = (f"The key coder {key_coder!r} for {op_name} is not deterministic, so equal keys "
                 "might not group together. Fix it by giving the key's class a deterministic "
                 "coder (is_deterministic() returning True), registered with "
                 "coders.registry.register_coder(KeyClass, KeyCoder).")
        return key_coder.as_deterministic_coder(op_name, error)

    def key_coder_of(self, cls: type) -> Tuple[Optional[ec.Coder], str]:
        """(the deterministic coder grouping keys of the registered class `cls` use, or None
        with the reason it has none); (None, "") when `cls` has no registered coder."""
        cached = self._key_coders.get(cls)
        if cached is not None:
            return cached
        if cls not in self.custom_types:
            return None, ""
        coder = self.get_coder(cls)
        try:
            result: Tuple[Optional[ec.Coder], str] = (self.verify_deterministic(
                coder, f"keys of type {cls.__module__}.{cls.__qualname__}"), "")
        except ValueError as exc:
            result = (None, str(exc))
        self._key_coders[cls] = result
        return result

    def custom_coders(self) -> List[Tuple[Any, Type[ec.Coder]]]:
        """Every (type, coder class) registered with `register_coder`, in registration order
        (a runner ships these to its worker processes)."""
        return self.get_custom_type_coder_tuples(self.custom_types)

    def install(self, custom: Iterable[Tuple[Any, Type[ec.Coder]]]) -> None:
        """Registers each (type, coder class) not already registered so (a worker process
        receiving the driver's `custom_coders()`)."""
        for t, c in custom:
            if self._coders.get(t) is not c or t not in self.custom_types:
                self.register_coder(t, c)


def _hashable(x: Any) -> bool:
    try:
        hash(x)
    except TypeError:
        return False
    return True


#: The registry pipelines use (Beam's `coders.registry`).
registry = CoderRegistry()
