"""Credentials that travel to the workers but are never stored: `Secret`.

A connector keeps each password or token it was given (in a URL, a DSN, a client option) as a
`Secret`: its repr and str are masked, and while a runner builds and stores a plan that may
reach a disk (the Spark streaming runner's plan, in `<checkpoint>/headrace/plan.pkl`, and the
pickled steps inside it) within `left_out(namespace)`, each Secret pickles as a reference
(`namespace:index`, the same for the same plan, so a restarted run's plan matches its
checkpoint) while its value goes to a map that the runner hands to its workers in memory (in
the closures Spark ships with each task, `known()`) and that `remember` makes a process
resolve. So nothing on disk holds a credential, and a restarted pipeline gets its credentials
from the code that builds it again, as it got them the first time. Outside `left_out` a Secret
pickles with its value (a local runner's copy of a DoFn, a batch task's closure).
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

__all__ = ["Secret", "known", "left_out", "remember", "reveal"]

_MASK = "**********"
_LEFT_OUT: contextvars.ContextVar[Optional[Tuple[str, Dict[str, str]]]] = contextvars.ContextVar(
    "headrace_secrets_left_out", default=None)
_KNOWN: Dict[str, str] = {}   # reference -> value, in the process that left it out or was told


class Secret:
    """A credential whose value is read with `get_secret_value()` and never shown or stored."""

    __slots__ = ("_value", "_ref")

    def __init__(self, value: Optional[str], ref: Optional[str] = None) -> None:
        if value is not None and not isinstance(value, str):
            value = str(value)
        self._value = value
        self._ref = ref

    def get_secret_value(self) -> str:
        """The credential; for one read back from a stored plan, the value `remember` gave."""
        if self._value is not None:
            return self._value
        value = _KNOWN.get(self._ref or "")
        if value is None:
            from headrace.errors import PipelineExecutionError
            raise PipelineExecutionError(
                "a credential was left out of the stored pipeline plan (headrace never writes "
                "credentials to a checkpoint) and this process was not given it; run the "
                "pipeline from the code that builds it, which holds the credential")
        return value

    def __repr__(self) -> str:
        return f"Secret('{_MASK}')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and (self._value, self._ref) == (other._value, other._ref)

    def __hash__(self) -> int:
        return hash((Secret, self._ref if self._value is None else self._value))

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        sink = _LEFT_OUT.get()
        if sink is None or self._value is None:
            return (Secret, (self._value, self._ref))
        namespace, out = sink
        value = self._value
        ref = next((r for r, v in out.items() if v == value), None)
        if ref is None:
            ref = f"{namespace}:{len(out)}"
            out[ref] = _KNOWN[ref] = value
        return (Secret, (None, ref))


@contextlib.contextmanager
def left_out(namespace: str = "") -> Iterator[Dict[str, str]]:
    """While active, a pickled Secret becomes a reference `namespace:index` (give each stored
    plan a namespace of its own, e.g. from its checkpoint's path); yields the {reference: value}
    map of the values left out. Nested, it yields the enclosing map."""
    current = _LEFT_OUT.get()
    if current is not None:
        yield current[1]
        return
    out: Dict[str, str] = {}
    token = _LEFT_OUT.set((namespace, out))
    try:
        yield out
    finally:
        _LEFT_OUT.reset(token)


def remember(values: Mapping[str, str]) -> None:
    """Makes this process resolve the references of `values` (a map from `left_out`)."""
    _KNOWN.update(values)


def known() -> Dict[str, str]:
    """Every reference this process can resolve (what a runner ships to its workers)."""
    return dict(_KNOWN)


def reveal(value: Any) -> Any:
    """`value`'s credential if it is a Secret, else `value` itself."""
    return value.get_secret_value() if isinstance(value, Secret) else value
