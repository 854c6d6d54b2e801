"""The sandboxed tracer: a plain function called once on symbolic arguments, which turns it into
expression nodes over the input columns, or fails.

The function's globals, closure cells and default values are replaced by stand-ins (numbers and
strings as they are, modules as views that expose only what follows, TimestampedValue, other
plain Python functions sandboxed the same way) and its builtins by `float`, `int` and `abs`
alone. Anything else (a method call, `len`, a logger, a metric, an import, `if` on a value, a
dict) makes the call fail (`_GiveUp`), and the step is not vectorised. What the call returns is
an expression over the input columns: `r["x"]`, numbers, strings, `+ - * / // %`, comparisons,
`float()`, `int()`, `abs()`, tuples and TimestampedValue. Since the sandbox gives the function
nothing it could change, running it once on symbols has no effect beyond describing the
computation.

Expression nodes are plain tuples (`("col", name)`, `("const", v)`, `("bin", op, a, b)`,
`("cmp", op, a, b)`, `("neg" | "pos" | "abs" | "float" | "int", a)`), evaluated over Arrow
batches by `evaluate`.
"""

from __future__ import annotations

import dis
import functools
import types
from typing import Any, Callable, Dict, List, Sequence, Tuple

from headrace.model.windowed import TimestampedValue

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


class _GiveUp(Exception):
    """This function cannot be traced, or this bundle cannot be evaluated exactly: run it element
    by element."""


class _Unsupported(_GiveUp):
    """No bundle of this input can be evaluated (a type or shape, not a value): stop trying."""


# ---- tracing ---------------------------------------------------------------------------------

_TRACED: List[List[tuple]] = []  # the nodes made during the current trace (innermost last)


def _node(sym: "_Sym") -> tuple:
    return object.__getattribute__(sym, "_n")


def _sym(node: tuple) -> "_Sym":
    """A new symbolic value; its node is recorded so that it is evaluated even if unused
    (the per-element path computes every expression a function evaluates, errors included)."""
    if _TRACED:
        _TRACED[-1].append(node)
    return _Sym(node)


class _Sym:
    """A symbolic value while a function is traced: operations build expression nodes.

    Every attribute is intercepted (`__getattribute__`), so nothing of the class leaks into a
    traced function as a constant; what is not an operation below gives up."""

    __slots__ = ("_n",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self, node: tuple) -> None:
        object.__setattr__(self, "_n", node)

    def __getitem__(self, key: Any) -> "_Sym":
        n = _node(self)
        if n[0] == "row" and not n[1] and type(key) is str:  # a dict row
            return _sym(("col", key))
        raise _GiveUp("indexing a value")

    def __getattribute__(self, name: str) -> "_Sym":
        n = _node(self)
        if n[0] == "row" and n[1] and not name.startswith("_"):  # a Row
            return _sym(("col", name))
        raise _GiveUp(f"attribute {name}")

    def __setattr__(self, name: str, value: Any) -> None:
        raise _GiveUp("assignment")

    def __delattr__(self, name: str) -> None:
        raise _GiveUp("deletion")

    def __add__(self, o): return _bin("+", self, o)
    def __radd__(self, o): return _bin("+", o, self)
    def __sub__(self, o): return _bin("-", self, o)
    def __rsub__(self, o): return _bin("-", o, self)
    def __mul__(self, o): return _bin("*", self, o)
    def __rmul__(self, o): return _bin("*", o, self)
    def __truediv__(self, o): return _bin("/", self, o)
    def __rtruediv__(self, o): return _bin("/", o, self)
    def __floordiv__(self, o): return _bin("//", self, o)
    def __rfloordiv__(self, o): return _bin("//", o, self)
    def __mod__(self, o): return _bin("%", self, o)
    def __rmod__(self, o): return _bin("%", o, self)
    def __lt__(self, o): return _sym(("cmp", "<", _node(self), _operand(o)))
    def __le__(self, o): return _sym(("cmp", "<=", _node(self), _operand(o)))
    def __gt__(self, o): return _sym(("cmp", ">", _node(self), _operand(o)))
    def __ge__(self, o): return _sym(("cmp", ">=", _node(self), _operand(o)))
    def __eq__(self, o): return _sym(("cmp", "==", _node(self), _operand(o)))  # type: ignore[override]
    def __ne__(self, o): return _sym(("cmp", "!=", _node(self), _operand(o)))  # type: ignore[override]
    def __neg__(self): return _sym(("neg", _node(self)))
    def __pos__(self): return _sym(("pos", _node(self)))
    def __abs__(self): return _sym(("abs", _node(self)))

    def _refuse(self, *args: Any) -> Any:
        raise _GiveUp("an operation a column expression cannot describe")

    __bool__ = __iter__ = __len__ = __index__ = __float__ = __int__ = __complex__ = _refuse
    __str__ = __repr__ = __format__ = __bytes__ = __contains__ = __reversed__ = _refuse
    __round__ = __trunc__ = __floor__ = __ceil__ = __invert__ = __call__ = _refuse
    __pow__ = __rpow__ = __and__ = __rand__ = __or__ = __ror__ = __xor__ = __rxor__ = _refuse
    __lshift__ = __rlshift__ = __rshift__ = __rrshift__ = __matmul__ = __rmatmul__ = _refuse
    __divmod__ = __rdivmod__ = __reduce__ = __reduce_ex__ = __copy__ = __deepcopy__ = _refuse
    __sizeof__ = __dir__ = __getstate__ = __setitem__ = __delitem__ = __enter__ = _refuse


def _bin(op: str, a: Any, b: Any) -> "_Sym":
    return _sym(("bin", op, _operand(a), _operand(b)))


def _const_ok(v: Any) -> bool:
    t = type(v)
    return t is bool or t is float or t is str or (t is int and _I64_MIN <= v <= _I64_MAX)


def _operand(v: Any) -> tuple:
    if type(v) is _Sym:
        return _node(v)
    if _const_ok(v):
        return ("const", v)
    raise _GiveUp(f"an operand of type {type(v).__name__}")


class _TV:
    """What the sandbox's TimestampedValue returns."""

    __slots__ = ("value", "ts")

    def __init__(self, value: Any, timestamp: Any) -> None:
        self.value = value
        self.ts = _operand(timestamp)


def _sym_float(x: Any = 0.0) -> Any:
    return _sym(("float", _operand(x))) if type(x) is _Sym else _plain_call(float, x)


def _sym_int(x: Any = 0) -> Any:
    return _sym(("int", _operand(x))) if type(x) is _Sym else _plain_call(int, x)


def _sym_abs(x: Any) -> Any:
    return _sym(("abs", _operand(x))) if type(x) is _Sym else _plain_call(abs, x)


def _plain_call(fn: Callable[[Any], Any], x: Any) -> Any:
    if not _const_ok(x):
        raise _GiveUp(f"{fn.__name__} of a {type(x).__name__}")
    return fn(x)


_BUILTINS = {"float": _sym_float, "int": _sym_int, "abs": _sym_abs}
_STAND_INS: Dict[int, Any] = {id(TimestampedValue): _TV, id(float): _sym_float, id(int): _sym_int,
                              id(abs): _sym_abs}
_FN_FLAGS = 0x04 | 0x08 | 0x20 | 0x80 | 0x100 | 0x200  # *args, **kwargs, generator, coroutine, ...


class _ModuleView:
    """A module as the sandbox shows it: only attributes that have stand-ins."""

    __slots__ = ("_mod", "_depth")

    def __init__(self, mod: types.ModuleType, depth: int) -> None:
        self._mod = mod
        self._depth = depth

    def __getattr__(self, name: str) -> Any:
        return _stand_in(getattr(self._mod, name), self._depth + 1)


def _stand_in(obj: Any, depth: int = 0) -> Any:
    if depth > 4:
        raise _GiveUp("too deep")
    special = _STAND_INS.get(id(obj))
    if special is not None:
        return special
    if obj is None or _const_ok(obj):
        return obj
    if isinstance(obj, types.ModuleType):
        return _ModuleView(obj, depth)
    if type(obj) is types.FunctionType:
        return _sandboxed(obj, depth + 1)
    if type(obj) is tuple:
        return tuple(_stand_in(o, depth + 1) for o in obj)
    raise _GiveUp(f"a {type(obj).__name__} in scope")


def _names(code: types.CodeType) -> set:
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names |= _names(c)
    return names


def _sandboxed(fn: types.FunctionType, depth: int = 0) -> types.FunctionType:
    """A copy of `fn` that sees only stand-ins (see the module docstring)."""
    code = fn.__code__
    if code.co_flags & _FN_FLAGS or code.co_kwonlyargcount or fn.__kwdefaults__:
        raise _GiveUp("a signature with *args, **kwargs or keyword-only arguments, or a generator")
    if not _plain_code(code):
        raise _GiveUp("an identity test, an import, or a write to a global or closure variable")
    env: Dict[str, Any] = {"__builtins__": _BUILTINS}
    for name in _names(code):
        if name in fn.__globals__:
            try:
                env[name] = _stand_in(fn.__globals__[name], depth)
            except _GiveUp:
                pass  # left out: using it raises NameError, which gives up
    closure = None
    if fn.__closure__:
        try:
            closure = tuple(types.CellType(_stand_in(c.cell_contents, depth)) for c in fn.__closure__)
        except ValueError:
            raise _GiveUp("an empty closure cell") from None
    defaults = tuple(_stand_in(d, depth) for d in fn.__defaults__) if fn.__defaults__ else None
    return types.FunctionType(code, env, fn.__name__, defaults, closure)


def _proxy(shape: tuple) -> Any:
    """The symbolic argument for a value of this shape."""
    if shape[0] == "tuple":
        return tuple(_proxy(s) for s in shape[1])
    if shape[0] == "const":
        return shape[1]
    return _Sym(shape)


def _shape(obj: Any) -> tuple:
    if type(obj) is _Sym:
        return _node(obj)
    if type(obj) is tuple:
        return ("tuple", tuple(_shape(o) for o in obj))
    if _const_ok(obj):
        return ("const", obj)
    raise _GiveUp(f"a result of type {type(obj).__name__}")


# Opcodes a traced function may not contain: `is` cannot be intercepted (it would compare the
# symbols themselves); writes to globals or closure cells would go to the sandbox's copies and
# be lost; imports, `with` and generators have effects of their own.
_REFUSED_OPS = frozenset({
    "IS_OP", "STORE_GLOBAL", "DELETE_GLOBAL", "STORE_DEREF", "DELETE_DEREF", "STORE_NAME",
    "DELETE_NAME", "IMPORT_NAME", "IMPORT_FROM", "IMPORT_STAR", "SETUP_WITH", "BEFORE_WITH",
    "SETUP_ASYNC_WITH", "BEFORE_ASYNC_WITH", "YIELD_VALUE", "GET_AWAITABLE", "RAISE_VARARGS"})


@functools.lru_cache(maxsize=256)
def _plain_code(code: types.CodeType) -> bool:
    """True when `code` and the code nested in it use none of `_REFUSED_OPS`."""
    if any(ins.opname in _REFUSED_OPS for ins in dis.get_instructions(code)):
        return False
    return all(_plain_code(c) for c in code.co_consts if isinstance(c, types.CodeType))


def _trace(fn: Any, args: Sequence[Any]) -> Tuple[Any, List[tuple]]:
    """What `fn(*args)` returns in the sandbox, and every expression node it made."""
    if type(fn) is not types.FunctionType:
        raise _GiveUp("not a plain function")
    code = fn.__code__
    if code.co_argcount < len(args) or code.co_argcount - len(args) > len(fn.__defaults__ or ()):
        raise _GiveUp("arity")
    made: List[tuple] = []
    _TRACED.append(made)
    try:
        return _sandboxed(fn)(*args), made
    finally:
        _TRACED.pop()
