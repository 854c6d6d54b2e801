"""Differential tests of headrace.runners.spark.fastpath (evaluate, combine): whatever a compiled
chain returns must be exactly what the per-element path computes (same values, same Python
types, floats bit for bit), or the bundle must fall back (`VectorChain.run` returns None); what
the vector combiner emits must be the panes of the model itself (`ReduceFnRunner` with the
same Windowing and CombineFn: windows, timestamps, accumulators; float sums up to rounding).
Functions with side effects, or that the sandbox cannot describe, must not compile at all."""

from __future__ import annotations

import collections
import functools
import math
import os
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import headrace as beam
from headrace.model.combine import (CombineFn, CountCombineFn, MaxCombineFn, MeanCombineFn, MinCombineFn,
                                    SumCombineFn)
from headrace.model.reduce import Element, KeyState, ReduceFnRunner
from headrace.model.time import MAX_TIMESTAMP_MICROS, MIN_TIMESTAMP_MICROS
from headrace.model.window import (
    GLOBAL_WINDOWS_TUPLE, FixedWindows, GlobalWindow, GlobalWindows, Sessions, SlidingWindows,
)
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.runners.spark.fastpath.combine import vector_combiner
from headrace.runners.spark.fastpath.evaluate import compile_chain

TV = beam.window.TimestampedValue
_N = int(os.environ.get("VECTORIZED_EXAMPLES", "200"))
PROPERTY = settings(max_examples=_N, deadline=None)


# ---- the per-element reference ------------------------------------------------------------

def reference(steps, batch, row_attributes=False):
    """(value, timestamp, windows) per element, as the per-element path computes them."""
    rows = batch.to_pylist()
    elems = [(beam.Row(**r) if row_attributes else r, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)
             for r in rows]
    for kind, fn in steps:
        out = []
        for v, ts, ws in elems:
            if kind == "window":
                out.append((v, ts, fn._assign(None, ts, GLOBAL_WINDOWS_TUPLE)))
            elif kind == "filter":
                if fn(v):
                    out.append((v, ts, ws))
            else:
                o = fn(v) if kind == "map" else fn(*v)
                out.append((o.value, o.timestamp_us, ws) if type(o) is TV else (o, ts, ws))
        elems = out
    return elems


def same(a, b):
    """Equal with equal types; floats bit for bit (NaN equals NaN, -0.0 differs from 0.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is tuple:
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
    return a == b


def check(steps, batch, row_attributes=False):
    """Asserts the vectorised result is the reference's (or a fallback); returns it."""
    try:
        expected = reference(steps, batch, row_attributes)
    except Exception:
        expected = None
    chain = compile_chain(steps, row_attributes)
    if chain is None:
        return None
    bundle = chain.run(batch)
    if bundle is None:
        return None
    assert expected is not None, "the element path raises, so the batch must fall back"
    got = list(zip(bundle.values(), bundle.ts_array().tolist(), bundle.window_tuples()))
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert same(g[0], e[0]), (g, e)
        assert type(g[1]) is int and g[1] == e[1], (g, e)
        assert g[2] == e[2], (g, e)
    return got


def batch_of(**cols):
    """A RecordBatch of (type, values) columns."""
    return pa.RecordBatch.from_arrays([pa.array(v, t) for t, v in cols.values()], names=list(cols))


ORDINARY = batch_of(key=(pa.string(), ["a", "b", "a", "c", "b", "a"]),
                    value=(pa.int64(), [1, 2, 3, 4, 5, 6]),
                    ts_ms=(pa.int64(), [1000, 3_600_000, 3_599_999, 7_300_123, 10, 99_999_999]),
                    x=(pa.int64(), [3, -4, 5, 7, -9, 11]),
                    i32=(pa.int32(), [1, -2, 3, -4, 5, -6]),
                    f=(pa.float64(), [0.5, -1.25, 3.0, 2.5, -7.75, 1e3]),
                    f32=(pa.float32(), [0.5, 1.5, -2.5, 3.25, 4.0, -0.125]),
                    flag=(pa.bool_(), [True, False, True, True, False, False]),
                    s=(pa.string(), ["x", "", "yy", "é", "x", "zz"]))


# ---- hypothesis: data and expressions -----------------------------------------------------

BIG_INTS = [0, 1, -1, 2**31 - 1, 2**53, 2**53 + 1, -(2**53) - 1, 2**62, -(2**62), 2**63 - 1, -(2**63)]
FLOATS = (0.0, -0.0, 0.5, -2.5, 3.0, 1e300, -1e-300, math.nan, math.inf, -math.inf, 2.0**53, 2.0**63)
INT_CONSTS = [0, 1, -1, 2, 3, -7, 10, 2**31, 2**53, 2**53 + 1, 2**62, -(2**62), 2**63 - 1]
COLUMN_TYPES = {"i": pa.int64(), "j": pa.int32(), "f": pa.float64(), "g": pa.float32(), "b": pa.bool_(),
                "s": pa.string(), "t": pa.string()}

ints64 = st.one_of(st.integers(-20, 20), st.sampled_from(BIG_INTS), st.integers(-(2**63), 2**63 - 1))
ints32 = st.one_of(st.integers(-20, 20), st.integers(-(2**31), 2**31 - 1))
floats64 = st.one_of(st.sampled_from(FLOATS), st.floats(-100, 100), st.floats())
floats32 = st.one_of(st.sampled_from([0.0, -0.0, 1.5, math.nan, math.inf]), st.floats(width=32))
strings = st.sampled_from(["", "a", "b", "ab", "é", "z", "a\x00", "B"])
VALUES = {"i": ints64, "j": ints32, "f": floats64, "g": floats32, "b": st.booleans(), "s": strings,
          "t": strings}


@st.composite
def batches(draw, nulls=False):
    """A record batch of every column type (nulls in some cells when `nulls`)."""
    n = draw(st.integers(0, 12))
    cols = {}
    for name, t in COLUMN_TYPES.items():
        values = VALUES[name] | st.none() if nulls else VALUES[name]
        cols[name] = (t, draw(st.lists(values, min_size=n, max_size=n)))
    return batch_of(**cols)


STRING_LEAVES = ["r['s']", "r['t']", "'a'", "''"]
BINARY = ["+", "-", "*", "/", "//", "%", "<", "<=", ">", ">=", "==", "!="]
UNARY = ["(-{})", "(+{})", "abs({})", "float({})", "int({})"]


def _extend(children):
    return st.one_of(
        st.tuples(st.sampled_from(BINARY), children, children).map(lambda t: f"({t[1]} {t[0]} {t[2]})"),
        st.tuples(st.sampled_from(UNARY), children).map(lambda t: t[0].format(t[1])))


def numeric_exprs(leaves=("r['i']", "r['j']", "r['f']", "r['g']", "r['b']")):
    """Expressions over numeric leaves, int constants and the float constants K[i]."""
    base = st.one_of(st.sampled_from(leaves), st.sampled_from(INT_CONSTS).map(lambda c: f"({c})"),
                     st.integers(0, len(FLOATS) - 1).map(lambda i: f"K[{i}]"))
    return st.recursive(base, _extend, max_leaves=5)


def exprs(leaves=("r['i']", "r['j']", "r['f']", "r['g']", "r['b']"), string_leaves=tuple(STRING_LEAVES)):
    """Numeric expressions, string comparisons (and concatenations), and bare strings."""
    strs = st.sampled_from(string_leaves)
    string_ops = st.tuples(strs, st.sampled_from(BINARY[6:] + ["+"]), strs).map(
        lambda t: f"({t[0]} {t[1]} {t[2]})")
    return st.one_of(numeric_exprs(leaves), numeric_exprs(leaves), string_ops, strs)


def fn_of(src, args="r"):
    """A plain lambda with the given body (float constants read from the tuple K)."""
    return eval(f"lambda {args}: {src}", {"K": FLOATS, "TV": TV})  # noqa: S307 - generated test code


# ---- differential properties --------------------------------------------------------------

@PROPERTY
@given(batch=batches(), src=exprs())
def test_map_of_one_expression_matches_the_element_path(batch, src):
    """Map(expr): exact values and types, or a fallback where Python raises or may differ."""
    check([("map", fn_of(src))], batch)


@PROPERTY
@given(batch=batches(), a=exprs(), b=numeric_exprs())
def test_tuple_map_then_maptuple_matches_the_element_path(batch, a, b):
    """Map to a tuple, then MapTuple over its parts."""
    steps = [("map", fn_of(f"({a}, {b}, 7)")), ("maptuple", fn_of("(u + w, v, w)", "v, u, w"))]
    check(steps, batch)
    check(steps[:1], batch)


@PROPERTY
@given(batch=batches(), pred=exprs(), src=exprs())
def test_filter_then_map_matches_the_element_path(batch, pred, src):
    """Filter(pred) | Map(expr): rows dropped exactly where bool(pred) is False."""
    check([("filter", fn_of(pred)), ("map", fn_of(f"({src}, r['s'])"))], batch)


@PROPERTY
@given(batch=batches(), src=exprs(), pred=exprs(("r[1]", "r[2]"), ("r[0]", "r[3]", "'a'")))
def test_map_then_filter_on_its_output_matches_the_element_path(batch, src, pred):
    """Map to a tuple, then Filter on the tuple's parts."""
    check([("map", fn_of(f"({src}, r['i'], r['f'], r['s'])")), ("filter", fn_of(pred))], batch)


WINDOWFNS = [GlobalWindows(), FixedWindows(60), FixedWindows(3600, 17.5), Sessions(600), Sessions(0.001)]


@PROPERTY
@given(batch=batches(), ts=numeric_exprs(), windowfn=st.sampled_from(WINDOWFNS),
       pred=st.sampled_from([None, "r[1] > 0", "r[0] != ''"]))
def test_timestamped_values_and_windows_match_the_element_path(batch, ts, windowfn, pred):
    """Map to TimestampedValue(value, expr) | [Filter] | WindowInto: timestamps and windows too."""
    steps = [("map", fn_of(f"TV((r['s'], r['i']), {ts})"))]
    if pred:
        steps.append(("filter", fn_of(pred)))
    steps.append(("window", windowfn))
    check(steps, batch)


@PROPERTY
@given(batch=batches(nulls=True), src=exprs())
def test_batches_with_nulls_match_or_fall_back(batch, src):
    """Columns with nulls: a referenced null column falls back; results otherwise exact."""
    got = check([("map", fn_of(f"({src}, r['s'])"))], batch)
    if got is not None and batch.num_rows:
        assert batch.column(batch.schema.get_field_index("s")).null_count == 0


# ---- ordinary data does vectorise ----------------------------------------------------------

COMMON = ["(r['key'], r['value'])", "r['x'] + 1", "r['x'] * 3 - r['value']", "r['x'] // 2", "r['x'] % 3",
          "r['x'] / 4", "r['f'] * 2.0", "-r['f'] + r['x']", "abs(r['x'])", "float(r['x'])", "int(r['f'])",
          "r['x'] > 0", "r['f'] <= r['x']", "r['s'] == 'x'", "r['key'] < r['s']", "(r['flag'], r['i32'] * 2)",
          "r['f32'] + 1", "r['flag'] + 1", "(r['key'], 1, 'k', 2.5)", "r['ts_ms'] / 1000.0"]


@pytest.mark.parametrize("src", COMMON)
def test_common_expressions_vectorise_on_ordinary_data(src):
    """Plain arithmetic on null-free, small, non-zero data runs vectorised and matches exactly."""
    assert check([("map", fn_of(src))], ORDINARY) is not None


def test_the_benchmark_chain_vectorises_exactly():
    """The benchmark's Map(TimestampedValue((key, value), ts_ms / 1000.0)) | FixedWindows(3600)."""
    steps = [("map", lambda r: beam.window.TimestampedValue((r["key"], r["value"]), r["ts_ms"] / 1000.0)),
             ("window", FixedWindows(3600))]
    got = check(steps, ORDINARY)
    assert got is not None and [g[1] for g in got] == [r["ts_ms"] * 1000 for r in ORDINARY.to_pylist()]


# ---- what compiles and what does not --------------------------------------------------------

SEEN = []
LIMIT = 3


def _counted(r):
    beam.metrics.Metrics.counter("vectorized_test", "rows").inc()
    return r["x"]


def _printed(r):
    print(r["x"])
    return r["x"]


def _appended(r):
    SEEN.append(r["x"])
    return r["x"]


def _branching(r):
    if r["x"] > 0:
        return r["x"]
    return -r["x"]


def _generator(r):
    yield r["x"]


def _closure_list():
    seen = []
    return lambda r: seen.append(r["x"]) or r["x"]


class _Holder:
    def method(self, r):
        return r["x"]


def _plus(a, b):
    return a + b


def _uses_helper(r):
    return _plus(r["x"], LIMIT) * 2


def _closure_int(k):
    return lambda r: r["x"] * k


CALLS = 0


def _global_counter(r):
    global CALLS
    CALLS += 1
    return r["x"]


def _nonlocal_counter():
    calls = 0

    def fn(r):
        nonlocal calls
        calls += 1
        return r["x"]
    return fn


NOT_COMPILED = {
    "write to a global": [("map", _global_counter)],
    "write to a closure variable": [("map", _nonlocal_counter())],
    "is None": [("filter", lambda r: r["x"] is not None)],
    "attribute of the symbol class": [("map", lambda r: (r.key, r.__class__))],
    "dunder of a column": [("map", lambda r: r["s"].__doc__)],
    "str of a column": [("map", lambda r: str(r["x"]))],
    "metric counter": [("map", _counted)],
    "print": [("map", _printed)],
    "append to a global list": [("map", _appended)],
    "append to a closure list": [("map", _closure_list())],
    "method call on a value": [("map", lambda r: r["s"].upper())],
    "len": [("map", lambda r: len(r["s"]))],
    "if on a value": [("map", _branching)],
    "and/or on a value": [("filter", lambda r: r["x"] > 0 and r["f"] > 0)],
    "dict result": [("map", lambda r: {"x": r["x"]})],
    "*args": [("map", lambda r, *a: r["x"])],
    "generator": [("map", _generator)],
    "bound method": [("map", _Holder().method)],
    "functools.partial": [("map", functools.partial(lambda k, r: r["x"] * k, 2))],
    "builtin": [("map", str)],
    "a row passed on": [("map", lambda r: (r["key"], r))],
    "TimestampedValue after WindowInto": [("window", FixedWindows(60)),
                                          ("map", lambda r: TV(r["x"], r["ts_ms"]))],
    "MapTuple on a row": [("maptuple", lambda a, b: a)],
    "unknown step kind": [("flatmap", lambda r: [r["x"]])],
}


@pytest.mark.parametrize("name", sorted(NOT_COMPILED))
def test_functions_that_cannot_be_described_do_not_compile(name):
    """Side effects, calls outside the whitelist, branches and other shapes are never vectorised."""
    assert compile_chain(NOT_COMPILED[name], name == "attribute of the symbol class") is None
    assert SEEN == [] and CALLS == 0


def test_attribute_access_only_on_row_chains_and_indexing_only_on_dict_chains():
    """`r.x` compiles only over Rows, `r["x"]` only over dicts."""
    assert compile_chain([("map", lambda r: r.x)], False) is None
    assert compile_chain([("map", lambda r: r["x"])], True) is None
    assert check([("map", lambda r: (r.key, r.x * 2))], ORDINARY, row_attributes=True) is not None


COMPILED = {
    "def calling a helper def": [("map", _uses_helper)],
    "closure over an int": [("map", _closure_int(5))],
    "default argument": [("map", lambda r, k=3: r["x"] * k)],
    "filter then map": [("filter", lambda r: r["x"] > 0), ("map", lambda r: (r["key"], r["x"]))],
    "maptuple after a tuple map": [("map", lambda r: (r["key"], r["x"], r["f"])),
                                   ("maptuple", lambda k, x, f: (k, x * f))],
    "TimestampedValue then sessions": [("map", lambda r: TV((r["key"], r["x"]), r["ts_ms"] / 1e3)),
                                       ("window", Sessions(600))],
    "global window then TimestampedValue": [("window", GlobalWindows()),
                                            ("map", lambda r: TV(r["x"], r["ts_ms"]))],
    "module constant": [("map", lambda r: r["f"] * math.pi)],
}


@pytest.mark.parametrize("name", sorted(COMPILED))
def test_plain_functions_compile_and_match(name):
    """Helpers, constants in closures and defaults, and chains of steps vectorise exactly."""
    assert check(COMPILED[name], ORDINARY) is not None


# ---- per-batch fallback -------------------------------------------------------------------

FALLBACKS = {
    "nulls": ("lambda r: r['x'] + 1", batch_of(x=(pa.int64(), [1, None, 3]))),
    "division by zero": ("lambda r: 10 / r['x']", batch_of(x=(pa.int64(), [1, 0, 3]))),
    "float division by -0.0": ("lambda r: 1.5 / r['f']", batch_of(f=(pa.float64(), [1.0, -0.0]))),
    "floor division by zero": ("lambda r: r['x'] // r['y']",
                               batch_of(x=(pa.int64(), [1, 2]), y=(pa.int64(), [5, 0]))),
    "int64 overflow": ("lambda r: r['x'] * 2**40", batch_of(x=(pa.int64(), [1, 2**30, 3]))),
    "addition overflow": ("lambda r: r['x'] + 1", batch_of(x=(pa.int64(), [0, 2**63 - 1]))),
    "inexact int division": ("lambda r: r['x'] / 3", batch_of(x=(pa.int64(), [3, 2**53 + 1]))),
    "inexact int/float comparison": ("lambda r: r['x'] < 0.5", batch_of(x=(pa.int64(), [0, 2**60 + 1]))),
    "int of nan": ("lambda r: int(r['f'])", batch_of(f=(pa.float64(), [1.5, math.nan]))),
    "uint64 beyond int64": ("lambda r: r['x'] + 0", batch_of(x=(pa.uint64(), [1, 2**64 - 1]))),
    "timestamp out of range": ("lambda r: TV(1, r['x'])", batch_of(x=(pa.int64(), [0, 10**13]))),
}


@pytest.mark.parametrize("name", sorted(FALLBACKS))
def test_a_batch_falls_back_where_python_would_differ_and_the_next_batch_does_not(name):
    """One bad row sends its batch to the element path; a good batch after it still vectorises."""
    src, bad = FALLBACKS[name]
    chain = compile_chain([("map", eval(src, {"TV": TV}))], False)  # noqa: S307
    assert chain is not None
    assert chain.run(bad) is None
    good = bad.filter(pa.array([i == 0 for i in range(bad.num_rows)]))
    assert chain.run(good) is not None


def test_an_unsupported_column_type_disables_the_chain_and_falls_back():
    """A column type the evaluator does not know (a timestamp) falls back, then stays off."""
    chain = compile_chain([("map", lambda r: (r["k"], r["t"]))], False)
    assert chain.run(pa.RecordBatch.from_pydict({"k": ["a"], "t": pa.array([0], pa.timestamp("s"))})) is None
    assert chain.run(pa.RecordBatch.from_pydict({"k": ["a"], "t": [1]})) is None


# ---- the vector combiner --------------------------------------------------------------------

COMBINE_FNS = [SumCombineFn(), CountCombineFn(), MeanCombineFn(), MinCombineFn(), MaxCombineFn()]
EARLIEST, LATEST = TimestampCombiner.OUTPUT_AT_EARLIEST, TimestampCombiner.OUTPUT_AT_LATEST
TIMESTAMP_COMBINERS = [EARLIEST, LATEST]


def element(value, timestamp_us, window):
    """One input of the model's ReduceFnRunner (its `Element`)."""
    return Element(value, timestamp_us, window)


class _Accumulators(CombineFn):
    """`fn` with extract_output deferred: the model's panes carry `fn`'s accumulators."""

    def __init__(self, fn):
        self.fn = fn

    def create_accumulator(self):
        return self.fn.create_accumulator()

    def add_input(self, acc, value):
        return self.fn.add_input(acc, value)

    def merge_accumulators(self, accumulators):
        return self.fn.merge_accumulators(accumulators)

    def extract_output(self, acc):
        return acc


def combine_reference(combine_fn, windowing, elements):
    """{(key, window): (accumulator, timestamp)}: the model's panes, key by key.

    Each key's (value, timestamp, window) inputs go through `ReduceFnRunner(windowing, ...)`,
    which merges windows by the WindowFn, accumulates with the CombineFn's `add_input` and
    `merge_accumulators`, and stamps each pane as the TimestampCombiner says; the watermark
    then passes the end of time. The panes carry the accumulators (whose `extract_output` the
    caller compares), so that the vector combiner's accumulator format is checked as well."""
    inputs = collections.defaultdict(list)
    for (k, v), ts, windows in elements:
        for w in windows:
            inputs[k].append(element(v, ts, w))
    runner = ReduceFnRunner(windowing, _Accumulators(combine_fn))
    out = {}
    for k, items in inputs.items():
        state = KeyState()
        panes = runner.process_elements(state, items, MIN_TIMESTAMP_MICROS).panes
        panes += runner.on_watermark(state, MAX_TIMESTAMP_MICROS).panes
        assert state.is_empty()
        for pane in panes:
            assert pane.pane_info.is_last and not pane.is_retraction
            assert (k, _wkey(pane.window)) not in out, "one pane per (key, window)"
            out[(k, _wkey(pane.window))] = (pane.value, pane.timestamp_us)
    return out


def _wkey(w):
    return "global" if isinstance(w, GlobalWindow) else (w.start_us, w.end_us)


def run_combiner(combine_fn, windowfn, timestamp_combiner, batches_, limit=100):
    """Adds each batch's bundle (k, v, t columns) to a vector combiner; its {(key, window): (acc,
    ts)} and the model's (`combine_reference`) for the same elements."""
    steps = [("map", lambda r: TV((r["k"], r["v"]), r["t"])), ("window", windowfn)]
    windowing = Windowing(windowfn, timestamp_combiner=timestamp_combiner)
    chain = compile_chain(steps, False)
    combiner = vector_combiner(combine_fn, windowing)
    assert chain is not None and combiner is not None
    combiner.limit = limit
    elements = []
    for b in batches_:
        bundle = chain.run(b)
        assert bundle is not None and combiner.accepts(bundle)
        combiner.add(bundle)
        elements += reference(steps, b)
    rows = list(combiner.emit(lambda k: repr(k).encode(), lambda kb, k, a, t, w: (k, _wkey(w), a, t)))
    got = {(k, w): (a, t) for k, w, a, t in rows}
    assert len(got) == len(rows), "one row per (key, window)"
    return got, combine_reference(combine_fn, windowing, elements)


def assert_same_groups(combine_fn, got, expected, float_values):
    """The same (key, window)s, timestamps, outputs and accumulators (floats up to rounding)."""
    assert set(got) == set(expected)
    for kw, (acc, ts) in expected.items():
        g_acc, g_ts = got[kw]
        assert type(g_ts) is int and g_ts == ts, kw
        out, g_out = combine_fn.extract_output(acc), combine_fn.extract_output(g_acc)
        if float_values and type(combine_fn) in (SumCombineFn, MeanCombineFn):
            assert type(g_out) is float and math.isclose(g_out, out, rel_tol=1e-9, abs_tol=1e-9), kw
            if type(combine_fn) is MeanCombineFn:
                assert same(g_acc[1], acc[1]), (kw, g_acc, acc)
        else:
            assert same(g_out, out) and same(g_acc, acc), (kw, g_acc, acc)


def make_batches(rnd, keys, values, times, n_batches):
    """Batches of random rows (key from `keys`, value from `values()`, time in seconds from `times()`)."""
    out = []
    for _ in range(n_batches):
        n = rnd.randint(0, 60)
        ks = [rnd.choice(keys) for _ in range(n)]
        vs = [values() for _ in range(n)]
        ts = [times() for _ in range(n)]
        kt = pa.string() if isinstance(keys[0], str) else pa.int64()
        vt = pa.float64() if vs and isinstance(vs[0], float) else pa.int64()
        tt = pa.float64() if ts and isinstance(ts[0], float) else pa.int64()
        out.append(batch_of(k=(kt, ks), v=(vt, vs), t=(tt, ts)))
    return out


@pytest.mark.parametrize("combine_fn", COMBINE_FNS, ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("windowfn", [GlobalWindows(), FixedWindows(60), FixedWindows(100, 30), Sessions(10)],
                         ids=repr)
@pytest.mark.parametrize("timestamp_combiner", TIMESTAMP_COMBINERS, ids=lambda c: c.name)
@pytest.mark.parametrize("seed", range(3))
def test_vector_combiner_matches_the_model_over_ints(combine_fn, windowfn, timestamp_combiner, seed):
    """Int values, str or int keys, batches in random order, compaction forced by a small limit."""
    rnd = random.Random(seed)
    keys = ["a", "b", "c", "é", ""] if seed % 2 == 0 else [0, -1, 7, 2**40]
    batches_ = make_batches(rnd, keys, lambda: rnd.randint(-1000, 1000), lambda: rnd.randint(0, 600), 12)
    rnd.shuffle(batches_)
    got, expected = run_combiner(combine_fn, windowfn, timestamp_combiner, batches_, limit=50)
    assert_same_groups(combine_fn, got, expected, False)


OFFSET_WINDOWFNS = [FixedWindows(100, 30), FixedWindows(60, -17.5), FixedWindows(7, 3),
                    FixedWindows(0.25, 0.1), FixedWindows(3600, 3599.999999), Sessions(10), Sessions(0.5)]


@pytest.mark.parametrize("combine_fn", COMBINE_FNS, ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("windowfn", OFFSET_WINDOWFNS, ids=repr)
@pytest.mark.parametrize("timestamp_combiner", TIMESTAMP_COMBINERS, ids=lambda c: c.name)
@pytest.mark.parametrize("fractional", [False, True])
def test_vector_combiner_matches_the_model_with_offsets_and_negative_timestamps(
        combine_fn, windowfn, timestamp_combiner, fractional):
    """Fixed windows with offsets (one given negative) and sessions over timestamps either side
    of zero, in whole or fractional seconds: the windows start where the model puts them."""
    rnd = random.Random(f"{windowfn!r} {fractional}")
    if fractional:
        def times():
            return rnd.randint(-2_000_000, 2_000_000) / 1000
    else:
        def times():
            return rnd.randint(-700, 700)
    batches_ = make_batches(rnd, ["a", "b", "c"], lambda: rnd.randint(-1000, 1000), times, 10)
    got, expected = run_combiner(combine_fn, windowfn, timestamp_combiner, batches_, limit=40)
    assert_same_groups(combine_fn, got, expected, False)
    assert any(w[0] < 0 for _, w in got) and any(w[1] > 0 for _, w in got)


def test_fixed_windows_with_an_offset_over_negative_timestamps():
    """FixedWindows(10, offset=3): windows [-17, -7), [-7, 3), [3, 13) (seconds), bounds exact."""
    us = [-7_000_001, -7_000_000, -1, 2_999_999, 3_000_000, -17_000_000]
    b = batch_of(k=(pa.string(), ["a"] * 6), v=(pa.int64(), [1, 2, 4, 8, 16, 32]),
                 t=(pa.float64(), [x / 1e6 for x in us]))
    got, expected = run_combiner(SumCombineFn(), FixedWindows(10, 3), LATEST, [b])
    assert_same_groups(SumCombineFn(), got, expected, False)
    assert got == {("a", (-17_000_000, -7_000_000)): (33, -7_000_001),
                   ("a", (-7_000_000, 3_000_000)): (14, 2_999_999),
                   ("a", (3_000_000, 13_000_000)): (16, 3_000_000)}


COMBINER_WINDOWFNS = [GlobalWindows(), FixedWindows(1), FixedWindows(5, 2), FixedWindows(3, -1.5),
                      Sessions(1), Sessions(2.5), Sessions(0.000001)]


@PROPERTY
@given(rows=st.lists(st.tuples(st.sampled_from(["a", "b", ""]), st.integers(-(2**40), 2**40),
                               st.integers(-10_000_000, 10_000_000)), max_size=80),
       size=st.integers(1, 30), windowfn=st.sampled_from(COMBINER_WINDOWFNS),
       combine_fn=st.sampled_from(COMBINE_FNS), timestamp_combiner=st.sampled_from(TIMESTAMP_COMBINERS))
def test_vector_combiner_matches_the_model(rows, size, windowfn, combine_fn, timestamp_combiner):
    """Any rows (microsecond times either side of zero), split into batches of any size and
    compacted often: the same panes as the model's ReduceFnRunner, accumulators exact."""
    batches_ = [batch_of(k=(pa.string(), [r[0] for r in rows[i:i + size]]),
                         v=(pa.int64(), [r[1] for r in rows[i:i + size]]),
                         t=(pa.float64(), [r[2] / 1e6 for r in rows[i:i + size]]))
                for i in range(0, len(rows), size)]
    got, expected = run_combiner(combine_fn, windowfn, timestamp_combiner, batches_, limit=8)
    assert_same_groups(combine_fn, got, expected, False)


@pytest.mark.parametrize("combine_fn", [SumCombineFn(), MeanCombineFn(), CountCombineFn()],
                         ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("windowfn", [GlobalWindows(), FixedWindows(60), Sessions(10)], ids=repr)
def test_vector_combiner_float_sums_agree_up_to_summation_order(combine_fn, windowfn):
    """Float values: sums and means equal up to rounding (summation order may differ)."""
    rnd = random.Random(7)
    batches_ = make_batches(rnd, ["a", "b"], lambda: rnd.uniform(-1e3, 1e3), lambda: rnd.randint(0, 300), 10)
    got, expected = run_combiner(combine_fn, windowfn, EARLIEST, batches_)
    assert_same_groups(combine_fn, got, expected, True)


@pytest.mark.parametrize("combine_fn", [SumCombineFn(), MeanCombineFn()], ids=lambda f: type(f).__name__)
def test_vector_combiner_int_sums_near_2_to_62_are_exact_python_ints(combine_fn):
    """Sums that overflow int64 come out as exact Python ints, not wrapped or floats."""
    rnd = random.Random(3)
    big = [2**62 - rnd.randint(0, 1000) for _ in range(40)]
    batches_ = [batch_of(k=(pa.string(), ["a", "b"] * 20), v=(pa.int64(), big[i:] + big[:i]),
                         t=(pa.int64(), [0] * 40)) for i in range(8)]
    got, expected = run_combiner(combine_fn, GlobalWindows(), EARLIEST, batches_, limit=30)
    assert_same_groups(combine_fn, got, expected, False)
    total = got[("a", "global")][0]
    assert type(total if type(combine_fn) is SumCombineFn else total[0]) is int
    assert (total if type(combine_fn) is SumCombineFn else total[0]) > 2**63


def test_sessions_exactly_gap_apart_stay_apart_and_closer_ones_merge():
    """Proto-sessions that touch stay apart; ones that overlap by one microsecond merge."""
    us = [100_000_000, 110_000_000, 120_000_001, 130_000_000, 500_000_000]
    t = [x / 1e6 for x in us]
    assert [TV(0, x).timestamp_us for x in t] == us
    b = batch_of(k=(pa.string(), ["a"] * 5), v=(pa.int64(), [1, 2, 4, 8, 16]), t=(pa.float64(), t))
    got, expected = run_combiner(SumCombineFn(), Sessions(10), EARLIEST, [b])
    assert_same_groups(SumCombineFn(), got, expected, False)
    assert sorted(got.values()) == [(1, us[0]), (2, us[1]), (12, us[2]), (16, us[4])]


@pytest.mark.parametrize("seed", range(4))
def test_sessions_merge_across_batches_added_in_any_order(seed):
    """Chains of sessions split over several batches (and compactions) merge like the model."""
    rnd = random.Random(seed)
    gap_us = 10_000_000
    times = []
    t = 0
    for _ in range(300):
        t += rnd.choice([gap_us, gap_us - 1, gap_us + 1, 1, 0, 3 * gap_us])
        times.append(t / 1e6)
    rows = [(rnd.choice("ab"), rnd.randint(1, 9), x) for x in times]
    rnd.shuffle(rows)
    batches_ = [batch_of(k=(pa.string(), [r[0] for r in rows[i:i + 37]]),
                         v=(pa.int64(), [r[1] for r in rows[i:i + 37]]),
                         t=(pa.float64(), [r[2] for r in rows[i:i + 37]])) for i in range(0, 300, 37)]
    got, expected = run_combiner(SumCombineFn(), Sessions(10), TIMESTAMP_COMBINERS[seed % 2], batches_,
                                 limit=20)
    assert_same_groups(SumCombineFn(), got, expected, False)


@pytest.mark.parametrize("combine_fn", COMBINE_FNS, ids=lambda f: type(f).__name__)
@pytest.mark.parametrize("windowfn", [GlobalWindows(), FixedWindows(60), Sessions(10)], ids=repr)
@pytest.mark.parametrize("seed", range(3))
def test_a_full_vector_combiner_emitted_early_merges_to_the_model(combine_fn, windowfn, seed):
    """A combiner past `full(max_groups)` is emitted and starts again (its keys too): at most
    `max_groups` groups and keys held between adds, and its emits, merged per key and window as
    the reduce side merges partials (overlapping sessions joined), are the model's groups."""
    rnd = random.Random(seed)
    keys = [f"k{i}" for i in range(12)] if seed % 2 == 0 else list(range(12))
    batches_ = make_batches(rnd, keys, lambda: rnd.randint(-1000, 1000), lambda: rnd.randint(0, 600), 15)
    steps = [("map", lambda r: TV((r["k"], r["v"]), r["t"])), ("window", windowfn)]
    windowing = Windowing(windowfn, timestamp_combiner=EARLIEST)
    chain = compile_chain(steps, False)
    combiner = vector_combiner(combine_fn, windowing)
    max_groups, emits, parts, elements = 8, 0, [], []
    record = lambda kb, k, a, t, w: (k, _wkey(w), a, t)  # noqa: E731
    for b in batches_:
        bundle = chain.run(b)
        combiner.add(bundle)
        elements += reference(steps, b)
        if combiner.full(max_groups):
            emits += 1
            parts += list(combiner.emit(lambda k: repr(k).encode(), record))
            assert combiner.rows == 0 and combiner.key_rows == 0 and not combiner.chunk_keys
        else:
            assert combiner.rows <= max_groups and combiner.key_rows <= max_groups
    parts += list(combiner.emit(lambda k: repr(k).encode(), record))
    assert emits >= 2
    by_key = collections.defaultdict(list)
    for k, w, a, t in parts:
        by_key[k].append([w, a, t])
    got = {}
    for k, cells in by_key.items():
        cells.sort(key=lambda c: (0, 0) if c[0] == "global" else c[0])
        joined = []
        for w, a, t in cells:
            last = joined[-1] if joined else None
            if last is not None and (w == last[0] or (windowfn.is_merging() and w[0] < last[0][1])):
                if w != last[0]:
                    last[0] = (last[0][0], max(last[0][1], w[1]))
                last[1] = combine_fn.merge_accumulators([last[1], a])
                last[2] = min(last[2], t)
            else:
                joined.append([w, a, t])
        for w, a, t in joined:
            got[(k, w)] = (a, t)
    assert_same_groups(combine_fn, got, combine_reference(combine_fn, windowing, elements), False)


def test_vector_combiner_refuses_what_it_cannot_combine_exactly():
    """Min/max of floats, bool values and a different WindowFn go down the element path."""
    chain = compile_chain([("map", lambda r: (r["key"], r["f"]))], False)
    bundle = chain.run(ORDINARY)
    everything = Windowing(GlobalWindows())
    assert not vector_combiner(MinCombineFn(), everything).accepts(bundle)
    assert not vector_combiner(MaxCombineFn(), everything).accepts(bundle)
    assert vector_combiner(SumCombineFn(), everything).accepts(bundle)
    flags = compile_chain([("map", lambda r: (r["key"], r["flag"]))], False).run(ORDINARY)
    assert not vector_combiner(SumCombineFn(), everything).accepts(flags)
    assert not vector_combiner(SumCombineFn(), Windowing(FixedWindows(60))).accepts(bundle)
    assert vector_combiner(beam.combiners.ToListCombineFn(), everything) is None
    assert vector_combiner(SumCombineFn(), Windowing(SlidingWindows(60, 30))) is None


# ---- regressions: wrong answers found in review -------------------------------------------

@pytest.mark.parametrize("src", ["f\"{r['x']}\"", "'%s' % r['x']", "'{}'.format(r['x'])"])
def test_string_formatting_of_a_value_is_not_a_constant(src):
    """An f-string / % / format of a column must not compile to the symbol's repr."""
    check([("map", fn_of(src))], ORDINARY)


def test_is_not_none_filter_is_not_a_constant():
    """Filter(r["v"] is not None) over a column with nulls must drop the null rows."""
    batch = batch_of(k=(pa.string(), ["a", "b", "c"]), v=(pa.int64(), [1, None, 3]))
    check([("filter", lambda r: r["v"] is not None), ("map", lambda r: (r["k"], 1))], batch)


def test_int_sums_stay_ints_when_another_bundle_has_float_values():
    """Once a combiner sums ints it refuses float bundles (they take the per-element path), so a
    key with only int values sums to an exact int."""
    ints = batch_of(k=(pa.string(), ["a", "b"]), v=(pa.int64(), [2**60 + 1, 1]), t=(pa.int64(), [0, 0]))
    floats = batch_of(k=(pa.string(), ["b"]), v=(pa.float64(), [0.5]), t=(pa.int64(), [0]))
    chain = compile_chain([("map", lambda r: TV((r["k"], r["v"]), r["t"]))], False)
    combiner = vector_combiner(SumCombineFn(), Windowing(GlobalWindows()))
    combiner.add(chain.run(ints))
    assert not combiner.accepts(chain.run(floats))
    rows = {k: a for _, k, a, _, _ in combiner.emit(lambda k: k.encode(), lambda *r: r)}
    assert same(rows["a"], 2**60 + 1) and same(rows["b"], 1)


def test_a_discarded_sub_expression_that_raises_still_falls_back():
    """(key, 10 // x)[0]: Python raises on x == 0 even though the quotient is discarded."""
    batch = batch_of(k=(pa.string(), ["a", "b"]), x=(pa.int64(), [1, 0]))
    check([("map", lambda r: (r["k"], 10 // r["x"])[0])], batch)


def test_a_float_sum_of_negative_zeros_is_positive_zero_as_in_python():
    """sum([-0.0, -0.0]) is 0.0 in Python (it starts from 0): the vector combiner agrees."""
    batch = batch_of(k=(pa.string(), ["a", "a"]), v=(pa.float64(), [-0.0, -0.0]), t=(pa.int64(), [0, 1]))
    got, expected = run_combiner(SumCombineFn(), GlobalWindows(), EARLIEST, [batch])
    assert same(got[("a", "global")][0], 0.0) and same(expected[("a", "global")][0], 0.0)
