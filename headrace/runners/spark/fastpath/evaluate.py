"""Vectorised bundles: chains of plain Map / MapTuple / Filter / WindowInto steps compiled (through
the sandboxed `tracer`) into column expressions and evaluated over Arrow record batches with
pyarrow and numpy.

Evaluation reproduces Python's semantics exactly or gives up: integers are int64 with checked
arithmetic (an overflow, where Python would grow the int, gives up), true division of integers
only below 2**53, no division or modulo by zero (Python raises), integer/float comparisons only
where the conversion is exact, timestamps converted like `TimestampedValue` does. Giving up on
a bundle (`VectorChain.run` returns None) sends it down the per-element path, which raises the
user's error if there is one; no bundle is ever half vectorised.
"""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindows, Sessions
from headrace.runners.kit.stage import FusedStage
from headrace.runners.kit.columnar import plain_steps
from headrace.runners.spark.fastpath.tracer import (_I64_MAX, _I64_MIN, _TV, _GiveUp, _proxy, _shape,
                                                    _trace, _Unsupported)

__all__ = ["VectorChain", "VectorBundle", "compile_chain", "vector_chain"]

_INT, _FLOAT, _BOOL, _STR = "int", "float", "bool", "str"
_EXACT_FLOAT_INT = 2**53
_TIME_GUARD = 2**62  # timestamps beyond this are left to Python (window arithmetic could overflow)


# ---- compiling a chain -----------------------------------------------------------------------

_WINDOWFNS = (GlobalWindows, FixedWindows, Sessions)


def vector_chain(stage: FusedStage, row_attributes: bool) -> Optional["VectorChain"]:
    """A VectorChain for a stage that is a linear chain of vectorisable steps reading rows at
    its root, else None (also for a stage counting its elements for the run report: the
    vectorised run does not count)."""
    if stage.counts:
        return None
    plain = plain_steps(stage.steps, stage.root)
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
