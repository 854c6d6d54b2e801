"""Vectorised bundles: plain Map / MapTuple / Filter / WindowInto steps evaluated over Arrow
columns, and the built-in combines (sum, count, mean, min, max) per key and window with numpy.

How a step's function is vectorised. It is called once, on symbolic arguments, in a sandbox:
its globals, closure cells and default values are replaced by stand-ins (numbers and strings as
they are, modules as views that expose only what follows, TimestampedValue, other plain Python
functions sandboxed the same way) and its builtins by `float`, `int` and `abs` alone. Anything
else (a method call, `len`, a logger, a metric, an import, `if` on a value, a dict) makes the
call fail, and the step is not vectorised. What the call returns is an expression over the
input columns: `r["x"]`, numbers, strings, `+ - * / // %`, comparisons, `float()`, `int()`,
`abs()`, tuples and TimestampedValue. Since the sandbox gives the function nothing it could
change, running it once on symbols has no effect beyond describing the computation.

Evaluation reproduces Python's semantics exactly or gives up: integers are int64 with checked
arithmetic (an overflow, where Python would grow the int, gives up), true division of integers
only below 2**53, no division or modulo by zero (Python raises), integer/float comparisons only
where the conversion is exact, timestamps converted like `TimestampedValue` does. Giving up on
a bundle (`VectorChain.run` returns None) sends it down the per-element path, which raises the
user's error if there is one; no bundle is ever half vectorised.

`VectorCombiner` accumulates the evaluated bundles of a partition into (key, window) groups as
arrays, compacting them as they grow, and emits one accumulator per group in the format of the
CombineFn (`SumCombineFn`, `CountCombineFn`, `MeanCombineFn`; `MinCombineFn` and
`MaxCombineFn` over integers). Sessions are merged with the model's rule: windows
[t, t + gap) of a key merge when they overlap; windows that merely touch stay apart.
"""

from __future__ import annotations

import dis
import functools
import types
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.model.combine import (CountCombineFn, MaxCombineFn, MeanCombineFn, MinCombineFn,
                                    SumCombineFn)
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import (GLOBAL_WINDOW, GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindows,
                                   IntervalWindow, Sessions)
from headrace.model.windowed import TimestampedValue
from headrace.runners.columnar import plain_steps
from headrace.runners.common import StepSpec

__all__ = ["VectorChain", "VectorCombiner", "VectorBundle", "compile_chain", "vector_chain",
           "vector_combiner"]

_INT, _FLOAT, _BOOL, _STR = "int", "float", "bool", "str"
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_EXACT_FLOAT_INT = 2**53
_TIME_GUARD = 2**62  # timestamps beyond this are left to Python (window arithmetic could overflow)


class _GiveUp(Exception):
    """This bundle cannot be evaluated exactly: run it element by element."""


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


# ---- compiling a chain -----------------------------------------------------------------------

_WINDOWFNS = (GlobalWindows, FixedWindows, Sessions)


def vector_chain(steps: Sequence[StepSpec], root: int, row_attributes: bool) -> Optional["VectorChain"]:
    """A VectorChain for a linear chain of vectorisable steps reading rows at `root`, else None."""
    plain = plain_steps(steps, root)
    return compile_chain([(kind, fn) for kind, fn, _ in plain], row_attributes) if plain else None


def compile_chain(steps: Sequence[Tuple[str, Any]], row_attributes: bool) -> Optional["VectorChain"]:
    """A VectorChain for steps ("map" | "maptuple" | "filter", fn) or ("window", WindowFn) over
    rows that are dicts (`r["col"]`), or `Row`s (`r.col`) when `row_attributes`; else None."""
    shape: tuple = ("row", row_attributes)
    ops: List[tuple] = []
    windowed = False
    try:
        for kind, fn in steps:
            if kind == "window":
                # Each of these puts an element of one window into one window, so the last one
                # alone gives the windows (SlidingWindows, which multiplies elements, is refused).
                if type(fn) not in _WINDOWFNS:
                    return None
                ops.append(("window", fn))
                windowed = windowed or type(fn) is not GlobalWindows
                continue
            if kind == "maptuple":
                if shape[0] != "tuple":
                    return None
                result, made = _trace(fn, _proxy(shape))
            elif kind in ("map", "filter"):
                result, made = _trace(fn, (_proxy(shape),))
            else:
                return None
            if kind == "filter":
                ops.append(("filter", _shape(result), None, made))
                continue
            if type(result) is _TV:
                if windowed:
                    return None  # windows stay as assigned from the earlier timestamps
                shape = _shape(result.value)
                ops.append(("map", shape, result.ts, made))
            else:
                shape = _shape(result)
                ops.append(("map", shape, None, made))
            if "row" in _kinds(shape):
                return None  # rows themselves are passed on: not a computation over columns
    except _GiveUp:
        return None
    except Exception:  # noqa: BLE001 - whatever the function does on symbols, it is not vectorisable
        return None
    return VectorChain(ops, shape) if any(op[0] == "map" for op in ops) else None


def _kinds(shape: tuple) -> set:
    if shape[0] == "tuple":
        out: set = set()
        for s in shape[1]:
            out |= _kinds(s)
        return out
    return {shape[0]}


# ---- evaluation ------------------------------------------------------------------------------

class _V:
    """An evaluated expression: kind and a numpy array (a pyarrow array for str), or a scalar."""

    __slots__ = ("kind", "data", "scalar")

    def __init__(self, kind: str, data: Any, scalar: bool) -> None:
        self.kind = kind
        self.data = data
        self.scalar = scalar


def _kind_of_const(v: Any) -> str:
    t = type(v)
    return _BOOL if t is bool else _INT if t is int else _FLOAT if t is float else _STR


def _column(batch: pa.RecordBatch, name: str) -> _V:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise _Unsupported(f"no column {name}")
    col = batch.column(idx)
    t = col.type
    if pa.types.is_dictionary(t):
        col = col.dictionary_decode()
        t = col.type
    if col.null_count:
        raise _GiveUp("nulls")
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _V(_STR, col, False)
    if pa.types.is_boolean(t):
        return _V(_BOOL, col.to_numpy(zero_copy_only=False), False)
    if pa.types.is_signed_integer(t):
        return _V(_INT, col.to_numpy().astype(np.int64, copy=False), False)
    if pa.types.is_unsigned_integer(t):
        arr = col.to_numpy()
        if t.bit_width == 64 and len(arr) and arr.max() > _I64_MAX:
            raise _GiveUp("uint64 beyond int64")
        return _V(_INT, arr.astype(np.int64), False)
    if pa.types.is_float64(t) or pa.types.is_float32(t):
        return _V(_FLOAT, col.to_numpy().astype(np.float64, copy=False), False)
    raise _Unsupported(f"column {name} of type {t}")


def _np(v: _V) -> Any:
    """The value as numpy data (scalars as numpy scalars of the kind's dtype)."""
    if v.kind == _STR:
        raise _Unsupported("arithmetic on strings")
    if v.scalar:
        return {_INT: np.int64, _FLOAT: np.float64, _BOOL: np.bool_}[v.kind](v.data)
    return v.data


def _f64(v: _V) -> Any:
    """The value as float64 data (Python converts int and bool to float the same way)."""
    return np.float64(v.data) if v.scalar else _np(v).astype(np.float64)


def _as_int(v: _V) -> _V:
    if v.kind == _BOOL:
        return _V(_INT, int(v.data) if v.scalar else v.data.astype(np.int64), v.scalar)
    return v


def _max_abs(v: _V) -> int:
    if v.scalar:
        return abs(int(v.data))
    if not len(v.data):
        return 0
    return max(abs(int(v.data.min())), abs(int(v.data.max())))


def _nonzero(v: _V) -> None:
    d = _np(v)
    if np.any(d == 0):
        raise _GiveUp("division by zero")


def _arith(op: str, a: _V, b: _V) -> _V:
    a, b = _as_int(a), _as_int(b)
    if _STR in (a.kind, b.kind):
        raise _Unsupported("string arithmetic")
    scalar = a.scalar and b.scalar
    if a.kind == _INT and b.kind == _INT:
        if op in ("+", "-", "*"):
            fn = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked}[op]
            try:
                out = fn(_pa(a), _pa(b))
            except pa.ArrowInvalid:
                raise _GiveUp("integer overflow") from None
            return _V(_INT, out.as_py() if scalar else out.to_numpy(), scalar)
        _nonzero(b)
        if op == "/":
            if _max_abs(a) > _EXACT_FLOAT_INT or _max_abs(b) > _EXACT_FLOAT_INT:
                raise _GiveUp("inexact integer division")
            return _V(_FLOAT, _scalar_of(np.true_divide(_np(a), _np(b)), scalar), scalar)
        if np.any((_np(a) == _I64_MIN) & (_np(b) == -1)):
            raise _GiveUp("integer overflow")
        f = np.floor_divide if op == "//" else np.remainder
        return _V(_INT, _scalar_of(f(_np(a), _np(b)), scalar), scalar)
    if op in ("//", "%"):
        raise _Unsupported("float floor division or modulo")
    x, y = _f64(a), _f64(b)
    if op == "/":
        _nonzero(b)
    with np.errstate(all="ignore"):
        out = {"+": np.add, "-": np.subtract, "*": np.multiply, "/": np.true_divide}[op](x, y)
    return _V(_FLOAT, _scalar_of(out, scalar), scalar)


def _pa(v: _V) -> Any:
    return pa.scalar(int(v.data), pa.int64()) if v.scalar else pa.array(v.data)


def _scalar_of(x: Any, scalar: bool) -> Any:
    return x.item() if scalar else x


_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
        "==": np.equal, "!=": np.not_equal}
_PC_CMP = {"<": pc.less, "<=": pc.less_equal, ">": pc.greater, ">=": pc.greater_equal,
           "==": pc.equal, "!=": pc.not_equal}


def _compare(op: str, a: _V, b: _V) -> _V:
    scalar = a.scalar and b.scalar
    if (a.kind == _STR) != (b.kind == _STR):
        raise _Unsupported("comparing a string with a number")
    if a.kind == _STR:
        out = _PC_CMP[op](a.data, b.data)
        return _V(_BOOL, out.as_py() if scalar else out.to_numpy(zero_copy_only=False), scalar)
    kinds = {a.kind, b.kind}
    if _FLOAT in kinds and kinds & {_INT, _BOOL}:
        i = a if a.kind != _FLOAT else b
        if _max_abs(_as_int(i)) > _EXACT_FLOAT_INT:
            raise _GiveUp("inexact int/float comparison")
    out = _CMP[op](_np(a), _np(b))
    return _V(_BOOL, _scalar_of(out, scalar), scalar)


def _unary(tag: str, a: _V) -> _V:
    if a.kind == _STR:
        raise _Unsupported(f"{tag} of a string")
    if tag == "float":
        return _V(_FLOAT, _scalar_of(_f64(a), a.scalar), a.scalar)
    if tag == "int":
        if a.kind != _FLOAT:
            return _as_int(a)
        d = _np(a)
        if not np.all(np.isfinite(d)) or np.any(np.abs(d) >= 2.0**63):
            raise _GiveUp("int of a non-finite or huge float")
        return _V(_INT, _scalar_of(np.trunc(d).astype(np.int64), a.scalar), a.scalar)
    if tag == "pos" and a.kind != _BOOL:
        return a
    a = _as_int(a)
    if a.kind == _INT and np.any(_np(a) == _I64_MIN):
        raise _GiveUp("integer overflow")
    f = np.negative if tag == "neg" else np.abs if tag == "abs" else np.positive
    return _V(a.kind, _scalar_of(f(_np(a)), a.scalar), a.scalar)


class _Eval:
    """Evaluates expression nodes over one batch (the batch and results filtered step by step)."""

    def __init__(self, batch: pa.RecordBatch) -> None:
        self.batch = batch
        self.memo: Dict[int, Tuple[tuple, _V]] = {}

    def __call__(self, node: tuple) -> _V:
        hit = self.memo.get(id(node))
        if hit is not None:
            return hit[1]
        tag = node[0]
        if tag == "col":
            v = _column(self.batch, node[1])
        elif tag == "const":
            v = _V(_kind_of_const(node[1]), node[1], True)
        elif tag == "bin":
            v = _arith(node[1], self(node[2]), self(node[3]))
        elif tag == "cmp":
            v = _compare(node[1], self(node[2]), self(node[3]))
        elif tag in ("neg", "pos", "abs", "float", "int"):
            v = _unary(tag, self(node[1]))
        else:
            raise _Unsupported(f"a {tag} value")
        self.memo[id(node)] = (node, v)  # the node is kept alive so its id stays unique
        return v

    def shape(self, shape: tuple) -> Any:
        """Evaluates every expression of a shape (a nested tuple of _V)."""
        if shape[0] == "tuple":
            return tuple(self.shape(s) for s in shape[1])
        return self(shape)

    def keep(self, mask: np.ndarray) -> None:
        """Drops the rows where `mask` is False from the batch and every evaluated column."""
        self.batch = self.batch.filter(pa.array(mask))
        for key, (node, v) in list(self.memo.items()):
            if not v.scalar:
                data = v.data.filter(pa.array(mask)) if v.kind == _STR else v.data[mask]
                self.memo[key] = (node, _V(v.kind, data, False))


def _truth(v: _V) -> Any:
    """bool(x) of each value."""
    if v.kind == _BOOL:
        return v.data
    if v.kind == _STR:
        if v.scalar:
            return bool(v.data)
        return pc.greater(pc.binary_length(v.data), 0).to_numpy(zero_copy_only=False)
    return _np(v) != 0


def _micros(v: _V) -> _V:
    """TimestampedValue's conversion of seconds to microseconds."""
    if v.kind == _INT:
        if _max_abs(v) > 9_223_372_036_854:
            raise _GiveUp("timestamp out of range")
        d = _np(v) * np.int64(1_000_000)
    elif v.kind == _FLOAT:
        d = _np(v)
        if not np.all((d > -9.2e12) & (d < 9.2e12)):
            raise _GiveUp("timestamp out of range")
        d = np.rint(d * 1_000_000.0).astype(np.int64)
    else:
        raise _Unsupported(f"a {v.kind} timestamp")
    return _V(_INT, int(d) if v.scalar else d, v.scalar)


class VectorBundle(NamedTuple):
    """A bundle's elements as columns: value (nested tuples of _V), timestamps, windows."""

    n: int
    value: Any
    ts: Any                 # int64 microseconds per element, or one int for all
    windowfn: Any           # the WindowFn whose windows the elements are in (GlobalWindows at first)

    def column(self, v: _V) -> Any:
        """A value column as a numpy array or pyarrow array (scalars broadcast)."""
        if not v.scalar:
            return v.data
        if v.kind == _STR:
            return pa.array([v.data] * self.n, pa.string())
        return np.full(self.n, v.data, dtype={_INT: np.int64, _FLOAT: np.float64, _BOOL: np.bool_}[v.kind])

    def ts_array(self) -> np.ndarray:
        """The timestamps as an int64 array."""
        return np.full(self.n, self.ts, np.int64) if np.isscalar(self.ts) else self.ts

    def values(self) -> List[Any]:
        """The values as Python objects, like the per-element path makes them."""
        return self._py(self.value)

    def _py(self, value: Any) -> List[Any]:
        if isinstance(value, tuple):
            return list(zip(*[self._py(v) for v in value])) if value else [()] * self.n
        if value.scalar:
            return [value.data] * self.n
        return value.data.to_pylist() if value.kind == _STR else value.data.tolist()

    def window_tuples(self) -> List[tuple]:
        """Each element's windows as the WindowFn's `_assign` gives them."""
        fn = self.windowfn
        if type(fn) is GlobalWindows:
            return [GLOBAL_WINDOWS_TUPLE] * self.n
        ts = self.ts_array().tolist()
        assign = fn._assign
        return [assign(None, t, GLOBAL_WINDOWS_TUPLE) for t in ts]


class VectorChain:
    """A compiled chain of vectorisable steps (see the module docstring)."""

    def __init__(self, ops: List[tuple], shape: tuple) -> None:
        self.ops = ops
        self.shape = shape  # the last Map's output
        self.disabled = False

    def run(self, batch: pa.RecordBatch) -> Optional[VectorBundle]:
        """The chain's output for a batch of rows, or None if it must run element by element."""
        if self.disabled:
            return None
        try:
            return self._run(batch)
        except _Unsupported:
            self.disabled = True
            return None
        except _GiveUp:
            return None
        except Exception:  # noqa: BLE001 - unforeseen: the per-element path is always right
            self.disabled = True
            return None

    def _run(self, batch: pa.RecordBatch) -> VectorBundle:
        ev = _Eval(batch)
        ts: Any = MIN_TIMESTAMP_MICROS
        windowfn: Any = GlobalWindows()
        for op in self.ops:
            if op[0] == "window":
                windowfn = op[1]
                if type(windowfn) is not GlobalWindows:
                    if np.isscalar(ts):
                        raise _Unsupported("windows by the timestamps of a source without any")
                    if len(ts) and (ts.min() < -_TIME_GUARD or ts.max() > _TIME_GUARD):
                        raise _GiveUp("timestamps near the ends of time")
                continue
            kind, shape, ts_node, made = op
            for node in made:  # every expression the function computed, used or not
                ev(node)
            if kind == "filter":
                truth: Any = _truth(ev.shape(shape)) if shape[0] != "tuple" else bool(shape[1])
                mask = np.full(ev.batch.num_rows, bool(truth)) if np.isscalar(truth) else truth
                if not mask.all():
                    ev.keep(mask)
                    if not np.isscalar(ts):
                        ts = ts[mask]
            elif ts_node is not None:
                ts = _micros(ev(ts_node)).data
        # the last Map's shape, as filtered by any Filter after it
        return VectorBundle(ev.batch.num_rows, ev.shape(self.shape), ts, windowfn)


# ---- combining -------------------------------------------------------------------------------

_COMBINES = {SumCombineFn: "sum", CountCombineFn: "count", MeanCombineFn: "mean",
             MinCombineFn: "min", MaxCombineFn: "max"}


def vector_combiner(combine_fn: Any, windowfn: Any, latest: bool) -> Optional["VectorCombiner"]:
    """A VectorCombiner for a built-in CombineFn and a Global/Fixed/Sessions WindowFn, else None."""
    what = _COMBINES.get(type(combine_fn))
    if what is None or type(windowfn) not in _WINDOWFNS:
        return None
    return VectorCombiner(what, windowfn, latest)


class _Groups(NamedTuple):
    code: np.ndarray   # the key's index in VectorCombiner.keys
    start: np.ndarray  # window start (microseconds; 0 in the global window)
    end: np.ndarray    # window end
    acc: np.ndarray    # sum / min / max (int64, float64, or object for ints that could overflow)
    n: np.ndarray      # elements in the group (int64)
    ts: np.ndarray     # the kept timestamp (earliest, or latest)


class VectorCombiner:
    """Accumulates vectorised bundles per (key, window) (see the module docstring)."""

    def __init__(self, what: str, windowfn: Any, latest: bool) -> None:
        self.what = what
        self.windowfn = windowfn
        self.merging = type(windowfn) is Sessions
        self.latest = latest
        self.chunks: List[_Groups] = []
        self.rows = 0
        self.limit = 1 << 18
        self.key_kind: Optional[str] = None
        self.value_kind: Optional[str] = None
        self.keys: List[Any] = []             # every key seen, by code
        self.code_of: Dict[Any, int] = {}

    def accepts(self, bundle: VectorBundle) -> bool:
        """True when the bundle's elements are (key, number) pairs this combiner can add."""
        v = bundle.value
        if not (type(v) is tuple and len(v) == 2 and isinstance(v[0], _V) and isinstance(v[1], _V)):
            return False
        if bundle.windowfn != self.windowfn:  # WindowFns are equal only to their own type
            return False
        key, val = v
        if key.kind not in (_STR, _INT) or (self.key_kind not in (None, key.kind)):
            return False
        if self.what == "count":
            return True
        if self.value_kind not in (None, val.kind):
            return False  # int and float sums of a partition are never mixed in one array
        if self.what in ("min", "max"):
            return val.kind == _INT
        return val.kind in (_INT, _FLOAT)

    def add(self, bundle: VectorBundle) -> None:
        """Adds a bundle that `accepts` said yes to."""
        if bundle.n == 0:
            return
        key, val = bundle.value
        self.key_kind = key.kind
        self.value_kind = val.kind
        codes = self._codes(bundle.column(key))
        ts = bundle.ts_array()
        acc = bundle.column(val) if self.what != "count" else np.zeros(bundle.n, np.int64)
        start, end = self._windows(ts)
        self.chunks.append(self._reduce(_Groups(codes, start, end, _wide(self.what, acc),
                                                np.ones(bundle.n, np.int64), ts)))
        self.rows += len(self.chunks[-1].start)
        if self.rows > self.limit:
            self._compact()
            self.limit = max(self.limit, 2 * self.rows)

    def _codes(self, keys: Any) -> np.ndarray:
        """Each key's code (its index in self.keys, which grows with new keys)."""
        enc = pc.dictionary_encode(keys if isinstance(keys, (pa.Array, pa.ChunkedArray)) else pa.array(keys))
        code_of, known = self.code_of, self.keys
        local = []
        for k in enc.dictionary.to_pylist():
            c = code_of.get(k)
            if c is None:
                c = code_of[k] = len(known)
                known.append(k)
            local.append(c)
        return np.asarray(local, np.int64)[enc.indices.to_numpy()]

    def _windows(self, ts: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
        fn = self.windowfn
        if type(fn) is GlobalWindows:
            zero = np.zeros(len(ts), np.int64)
            return zero, zero
        if type(fn) is FixedWindows:
            start = ts - np.remainder(ts - fn.offset_us, fn.size_us)
            return start, start + fn.size_us
        return ts, ts + fn.gap_size_us

    def _compact(self) -> None:
        if len(self.chunks) > 1:
            c = self.chunks
            merged = _Groups(*(np.concatenate([g[i] for g in c]) for i in range(len(_Groups._fields))))
            self.chunks = [self._reduce(merged._replace(acc=_wide(self.what, merged.acc)))]
        self.rows = len(self.chunks[0].start) if self.chunks else 0

    def _reduce(self, g: _Groups) -> _Groups:
        """One row per (key, window): per window, or per merged session."""
        n = len(g.code)
        if not n:
            return g
        order = _order(g.code, g.start)
        code, start, end = g.code[order], g.start[order], g.end[order]
        first = np.ones(n, bool)
        first[1:] = code[1:] != code[:-1]
        if self.merging:
            first[1:] |= start[1:] >= _running_max_end(code, end)[:-1]
        else:
            first[1:] |= start[1:] != start[:-1]
        idx = np.flatnonzero(first)
        red = np.minimum if self.what == "min" else np.maximum if self.what == "max" else np.add
        return _Groups(code[idx], start[idx], np.maximum.reduceat(end, idx), red.reduceat(g.acc[order], idx),
                       np.add.reduceat(g.n[order], idx),
                       (np.maximum if self.latest else np.minimum).reduceat(g.ts[order], idx))

    def emit(self, key_bytes: Callable[[Any], bytes],
             record: Callable[[bytes, Any, Any, int, Any], Any]) -> Iterator[Any]:
        """Yields `record(key bytes, key, accumulator, timestamp, window)` for every group."""
        self._compact()
        if not self.chunks:
            return
        g = self.chunks[0]
        self.chunks = []
        self.rows = 0
        acc = g.acc
        if self.what in ("sum", "mean") and acc.dtype == np.float64:
            acc = acc + 0.0  # Python's sum starts at 0, so a sum of -0.0s is 0.0
        if self.what == "count":
            accs: List[Any] = g.n.tolist()
        elif self.what == "mean":
            accs = list(zip(acc.tolist(), g.n.tolist()))
        else:
            accs = acc.tolist()
        keys = self.keys
        kbs: List[Optional[bytes]] = [None] * len(keys)
        windows: Dict[Tuple[int, int], Any] = {}
        is_global = type(self.windowfn) is GlobalWindows
        w: Any
        for c, a, t, s, e in zip(g.code.tolist(), accs, g.ts.tolist(), g.start.tolist(), g.end.tolist()):
            kb = kbs[c]
            if kb is None:
                kb = kbs[c] = key_bytes(keys[c])
            if is_global:
                w = GLOBAL_WINDOW
            else:
                w = windows.get((s, e))
                if w is None:
                    w = windows[(s, e)] = IntervalWindow._of(s, e)
            yield record(kb, keys[c], a, t, w)


def _wide(what: str, acc: np.ndarray) -> np.ndarray:
    """Integer sums as Python ints when int64 could overflow (never for realistic inputs)."""
    if what in ("sum", "mean") and acc.dtype == np.int64 and len(acc) and \
            max(abs(int(acc.min())), abs(int(acc.max()))) * len(acc) > _I64_MAX:
        return acc.astype(object)
    return acc


def _band(code: np.ndarray, value: np.ndarray) -> Optional[np.ndarray]:
    """code * span + (value - min) as one int64 sort key, when that cannot overflow."""
    lo, hi = int(value.min()), int(value.max())
    span = hi - lo + 1
    if (int(code.max()) + 1) * span >= _TIME_GUARD:
        return None
    return code * span + (value - lo)


def _order(code: np.ndarray, value: np.ndarray) -> np.ndarray:
    """The permutation that sorts rows by (code, value)."""
    band = _band(code, value)
    return np.lexsort((value, code)) if band is None else np.argsort(band)


def _running_max_end(code: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Per row (sorted by key code, then start): the largest end among that key's rows so far.

    Each key's ends are laid in a band of their own (code * span + end - min), so that one
    running maximum over all rows serves every key; ends are ranked first if bands would
    overflow."""
    band = _band(code, end)
    if band is not None:
        lo = int(end.min())
        span = int(end.max()) - lo + 1
        return np.maximum.accumulate(band) - code * span + lo
    times = np.unique(end)
    span = len(times) + 1
    rank = np.searchsorted(times, end).astype(np.int64)
    run = np.maximum.accumulate(code * span + rank)
    return times[run - code * span]
