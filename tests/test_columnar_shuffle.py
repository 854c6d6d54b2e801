"""The batch runner's columnar shuffle of vectorised combines (`fastpath.blocks`): a grouping's
reduce partitions, fed the map sides' groups as columnar blocks, give exactly the panes, in the
same order, that they give when fed the same groups as partial-accumulator records (the record
path, `reduce_side._reduce_final` over sorted records): values bit for bit, timestamps, windows,
pane infos; whether the blocks are held or spilled in sub-buckets, and whether ordinary records
share a partition with them. No Spark: the shuffle is simulated (`partition_of`, a random fetch
order of the map partitions' outputs)."""

from __future__ import annotations

import pickle
import random
import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.model.combine import CountCombineFn, MaxCombineFn, MeanCombineFn, MinCombineFn, SumCombineFn
from headrace.model.reduce import FINAL_PANE
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.window import FixedWindows, GlobalWindows, Sessions
from headrace.runners.kit.grouping import GroupingCore
from headrace.runners.kit.partial import PartialCombiner
from headrace.runners.spark.batch import map_side, reduce_side
from headrace.runners.spark.batch.map_side import partition_of
from headrace.runners.spark.batch.reduce_side import sort_shuffled
from headrace.runners.spark.fastpath import blocks as blocks_module
from headrace.runners.spark.fastpath import columns
from headrace.runners.spark.fastpath.blocks import BlockRecords, BlockStore, _sequential_sums
from headrace.runners.spark.fastpath.combine import vector_combiner
from headrace.runners.spark.fastpath.evaluate import compile_chain
from headrace.model import coders
import headrace as beam
from tests.model.test_vectorized import same

TV = beam.window.TimestampedValue

COMBINE_FNS = [SumCombineFn(), CountCombineFn(), MeanCombineFn(), MinCombineFn(), MaxCombineFn()]
WINDOWFNS = [GlobalWindows(), FixedWindows(60), FixedWindows(100, 30), Sessions(10)]
COMBINERS = [TimestampCombiner.OUTPUT_AT_EARLIEST, TimestampCombiner.OUTPUT_AT_LATEST,
             TimestampCombiner.OUTPUT_AT_EOW]


def batch(rnd, keys, float_values, rows):
    ks = [rnd.choice(keys) for _ in range(rows)]
    if float_values:
        vs = [rnd.choice([-0.0, 0.1, 1e16, -1e16, 3.7, rnd.uniform(-1e3, 1e3)]) for _ in range(rows)]
    else:
        vs = [rnd.randint(-1000, 1000) for _ in range(rows)]
    ts = [rnd.randint(0, 600) for _ in range(rows)]
    kt = pa.string() if isinstance(keys[0], str) else pa.int64()
    vt = pa.float64() if float_values else pa.int64()
    return pa.RecordBatch.from_arrays([pa.array(ks, kt), pa.array(vs, vt), pa.array(ts, pa.int64())],
                                      names=["k", "v", "t"])


def map_outputs(rnd, combine_fn, windowing, float_values, keys, maps, parts, mixed):
    """Per map partition, its shuffle records twice: the groups as records, and as blocks (the
    same groups: two vector combiners fed the same bundles, emitted at the same points). With
    `mixed`, some bundles go through the element path (`PartialCombiner`) in both."""
    steps = [("map", lambda r: TV((r["k"], r["v"]), r["t"])), ("window", windowing.windowfn)]
    chain = compile_chain(steps, False)
    label = "Sum"
    kb = lambda k: coders.encode_key(k)  # noqa: E731
    merging = windowing.windowfn.is_merging()
    as_records, as_blocks = [], []
    for part in range(maps):
        a, b = vector_combiner(combine_fn, windowing), vector_combiner(combine_fn, windowing)
        recs, blks, emit = [], [], 0
        partial = PartialCombiner(label, combine_fn, windowing)
        for _ in range(rnd.randint(1, 6)):
            floats = part % 2 == 1 if float_values is None else float_values   # (None: by partition)
            bundle = chain.run(batch(rnd, keys[part % len(keys)], floats, rnd.randint(0, 40)))
            if mixed and rnd.random() < 0.3:
                partial.add_all(zip(bundle.values(), bundle.ts_array().tolist(), bundle.window_tuples()))
                continue
            a.add(bundle)
            b.add(bundle)
            limit = rnd.choice([4, 16, 1000])
            if a.full(limit) & b.full(limit):   # (both compacted alike: float sums in one order)
                emit += 1
                record = map_side._partial_record(merging, emit)
                recs += [((r[0][0], r[0][1], r[0][2], part, emit), r[1]) for r in
                         a.emit(kb, lambda kb_, k, acc, t, w: record(kb_, k, combine_fn.compact(acc), t, w))]
                blks += list(b.emit_blocks(kb, parts, part, emit))
        emit += 1
        record = map_side._partial_record(merging, emit)
        ordinary = [((r[0][0], r[0][1], r[0][2], part, emit), r[1]) for r in partial.emit(record)]
        recs += ordinary
        blks += ordinary
        recs += [((r[0][0], r[0][1], r[0][2], part, emit), r[1]) for r in
                 a.emit(kb, lambda kb_, k, acc, t, w: record(kb_, k, combine_fn.compact(acc), t, w))]
        blks += list(b.emit_blocks(kb, parts, part, emit))
        as_records.append(recs)
        as_blocks.append(blks)
    return as_records, as_blocks


def shuffled(outputs, parts, p, order):
    """Reduce partition p's records, the map partitions' outputs fetched in `order`, pickled
    and read back as the shuffle carries them (blocks in their narrow form)."""
    return [pickle.loads(pickle.dumps(r, pickle.HIGHEST_PROTOCOL))
            for m in order for r in outputs[m] if partition_of(r[0]) % parts == p]


def reduce(combine_fn, windowing, records, budget, explode):
    grouping = GroupingCore("Sum", windowing, combine_fn, inputs_are_accumulators=True,
                            expire_at_end_of_window=True)
    assert grouping.core.one_pane_per_window
    return list(reduce_side._reduce_final(grouping, combine_fn,
                                          sort_shuffled(records, budget, explode)))


def as_tuples(wvs):
    return [(wv.value, wv.timestamp_us, wv.windows, wv.pane_info) for wv in wvs]


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**6), fn=st.sampled_from(COMBINE_FNS), windowfn=st.sampled_from(WINDOWFNS),
       combiner=st.sampled_from(COMBINERS), float_values=st.sampled_from([True, False, None]),
       int_keys=st.sampled_from([True, False, None]),
       parts=st.integers(1, 3), mixed=st.booleans(), budget=st.sampled_from([1.0, 3_000.0, 1e12]),
       max_rows=st.sampled_from([1, 3, 1 << 14]))
def test_blocks_give_the_record_paths_panes(seed, fn, windowfn, combiner, float_values, int_keys,
                                            parts, mixed, budget, max_rows):
    saved, blocks_module._MAX_ROWS = blocks_module._MAX_ROWS, max_rows   # (blocks cut small too)
    try:
        check_blocks(seed, fn, windowfn, combiner, float_values, int_keys, parts, mixed, budget)
    finally:
        blocks_module._MAX_ROWS = saved


def check_blocks(seed, fn, windowfn, combiner, float_values, int_keys, parts, mixed, budget):
    if float_values is not False and type(fn) in (MinCombineFn, MaxCombineFn):
        float_values = False   # (the vector combiner takes extrema of integers only)
    rnd = random.Random(seed)
    int_list, str_list = [0, -1, 7, 2**40, 3, 12], ["a", "b", "", "é", "k1", "k2", "zz"]
    # per map partition (in turn): int keys, str keys, or both kinds in one grouping
    keys = [int_list] if int_keys is True else [str_list] if int_keys is False else [int_list, str_list]
    windowing = Windowing(windowfn, timestamp_combiner=combiner)
    maps = rnd.randint(1, 4)
    as_records, as_blocks = map_outputs(rnd, fn, windowing, float_values, keys, maps, parts, mixed)
    explode = BlockRecords(coders.dumps(fn), windowing, vector_combiner(fn, windowing).what)
    for p in range(parts):
        order = list(range(maps))
        rnd.shuffle(order)
        expected = as_tuples(reduce(fn, windowing, shuffled(as_records, parts, p, range(maps)), 1e12, None))
        got = as_tuples(reduce(fn, windowing, shuffled(as_blocks, parts, p, order), budget, explode))
        if budget < 1e12:   # blocks spilled in sub-buckets: keys in another order
            got, expected = by_key(got), by_key(expected)
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert same(g[0], e[0]) and g[1:] == e[1:], (g, e)
            assert g[3] == FINAL_PANE


def by_key(panes):
    """The panes grouped by key (keys by their bytes), each key's in their order."""
    keys = sorted({coders.encode_key(p[0][0]) for p in panes})
    return [p for kb in keys for p in panes if coders.encode_key(p[0][0]) == kb]


def test_blocks_over_the_budget_spill_in_sub_buckets_and_their_files_go(monkeypatch, tmp_path):
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    rnd = random.Random(5)
    windowing = Windowing(FixedWindows(60))
    fn = SumCombineFn()
    keys = [f"key{i}" for i in range(300)]
    as_records, as_blocks = map_outputs(rnd, fn, windowing, False, [keys], 4, 1, False)
    blocks = [r[1] for m in as_blocks for r in m]
    store = BlockStore(budget=sum(b.nbytes() for b in blocks) / 4)
    for b in blocks:
        store.add(b)
    assert store.spilled() and len(list(tmp_path.iterdir())) == 0    # (anonymous files)
    groups = list(store.groups())
    assert len(groups) > 8
    seen = [set(pa.concat_arrays([b.kbs for b in g]).to_pylist()) for g in groups]
    assert sum(len(s) for s in seen) == len(set().union(*seen)) == len(
        {r[0][0] for m in as_records for r in m})      # every key in exactly one sub-bucket
    rows = sum(len(b.code) for g in groups for b in g)
    assert rows == sum(len(b.code) for b in blocks)
    expected = as_tuples(reduce(fn, windowing, [r for m in as_records for r in m], 1e12, None))
    got = as_tuples(reduce(fn, windowing, [r for m in as_blocks for r in m], 1.0, None))
    assert sorted(got, key=repr) == sorted(expected, key=repr)   # (sub-buckets reorder keys)


@pytest.mark.parametrize("dtype", [np.float64, object])
def test_sequential_sums_add_from_zero_in_order(dtype):
    rnd = random.Random(1)
    lengths = [rnd.choice([1, 1, 2, 3, 17]) for _ in range(200)]
    pool = [-0.0, 1e16, 1.0, -1e16, 0.1] + ([3] if dtype is object else [])   # (Python ints too)
    values = [rnd.choice(pool) for _ in range(sum(lengths))]
    idx = np.cumsum([0] + lengths[:-1])
    got = _sequential_sums(np.array(values, dtype), idx).tolist()
    expected, i = [], 0
    for n in lengths:
        s = 0
        for v in values[i:i + n]:
            s = s + v
        expected.append(s)
        i += n
    assert all(same(g, e) for g, e in zip(got, expected))


def test_a_partition_key_of_a_block_names_its_partition():
    assert partition_of((5, 0, 1)) == 5
    assert partition_of((b"k", 3, False, 0, 1)) == zlib.crc32(b"k")
    buckets = blocks_module._sub_bucket(np.array([0, 1, 2**32 - 1], np.uint32))
    assert buckets.min() >= 0 and buckets.max() < blocks_module._SUB_BUCKETS


def test_rows_are_ordered_alike_by_one_sort_key_and_by_lexsort():
    """`_row_order`'s banded int64 key and its lexsort fallback (times too far apart to band)
    give the same order: key rank, sort time, then the rows' (map partition, emit)."""
    rng = np.random.default_rng(3)
    rows = [int(x) for x in rng.integers(1, 50, 6)]     # the rows of six emits
    pe = np.repeat([int(rng.integers(0, 3)) << 32 | i for i in range(len(rows))], rows)
    kid = rng.integers(0, 20, sum(rows))
    n = sum(rows)    # (times unique within an emit, as a key's rows of an emit are; equal across)
    small = np.concatenate([rng.permutation(r) for r in rows])
    for t in (small, small * 2**57 - 2**62):
        order = blocks_module._row_order(pe, kid, t)
        expected = sorted(range(n), key=lambda i: (kid[i], t[i], pe[i] >> 32, pe[i] & 0xFFFFFFFF))
        assert order.tolist() == expected


def test_a_block_is_cut_into_blocks_of_at_most_max_rows_whole_keys(monkeypatch):
    monkeypatch.setattr(blocks_module, "_MAX_ROWS", 3)
    rng = np.random.default_rng(8)
    keys = [f"k{i}" for i in range(40)]
    code = np.concatenate([np.full(int(c), i) for i, c in enumerate(rng.integers(1, 6, len(keys)))])
    rows = np.arange(len(code), dtype=np.int64)
    kbs = pa.array([k.encode() for k in keys], pa.large_binary())
    out = list(blocks_module.split_blocks(2, 7, 3, kbs, pa.array(keys), code,
                                          rows, rows + 1, rows * 10, np.ones(len(code), np.int64), rows))
    seen = []
    for (p, part, emit), b in out:
        assert (part, emit) == (2, 7) and set(b.pe.tolist()) == {2 << 32 | 7}
        assert len(b.code) <= 3 or len(b.kbs) == 1        # a key with more rows is a block alone
        for c, s, a in zip(b.code.tolist(), b.start.tolist(), b.acc.tolist()):
            k = b.keys[c].as_py()
            assert zlib.crc32(k.encode()) % 3 == p and b.kbs[c].as_py() == k.encode()
            seen.append((k, s, a))
    assert sorted(seen) == sorted((keys[c], r, r * 10) for c, r in zip(code.tolist(), rows.tolist()))


@settings(max_examples=200, deadline=None)
@given(keys=st.one_of(st.lists(st.text(alphabet=st.characters(blacklist_categories=["Cs"])), max_size=20),
                      st.lists(st.integers(-2**63, 2**63 - 1), max_size=20)))
def test_keys_encoded_over_the_array_are_the_grouping_bytes(keys):
    from headrace.runners.spark.fastpath.combine import encoded_keys
    array = pa.array(keys, pa.int64() if keys and isinstance(keys[0], int) else pa.large_string())
    assert encoded_keys(array).to_pylist() == [coders.encode_key(k) for k in keys]


_I64 = np.iinfo(np.int64)


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.integers(_I64.min, _I64.max), max_size=40),
       ref=st.lists(st.integers(_I64.min, _I64.max), max_size=40),
       near=st.integers(0, 2**40), small=st.booleans())
def test_a_block_pickles_narrow_and_reads_back_exactly(values, ref, near, small):
    """Every int64 column, however it spans (int64's extremes, a timestamp's least and greatest,
    ends far from or near their starts), reads back as the same int64 values."""
    n = min(len(values), len(ref))
    start = np.array(ref[:n], np.int64)
    if small:    # the common case: ends and kept timestamps near the starts, counts small
        start = np.array([v % (1 << 40) for v in ref[:n]], np.int64)
        end = start + np.array([v % (near + 1) for v in values[:n]], np.int64)
    else:
        end = np.array(values[:n], np.int64)
    kbs = pa.array([b"k"], pa.large_binary())
    block = blocks_module.GroupBlock(
        np.array(values[:n], np.int64), kbs, np.zeros(1, np.uint32), pa.array(["k"]),
        np.zeros(n, np.int64), start, end, np.array(values[:n], np.float64), np.ones(n, np.int64), end.copy())
    narrow = pickle.loads(pickle.dumps(block, pickle.HIGHEST_PROTOCOL))
    assert narrow.nbytes() == block.nbytes()   # (a store budgets the block as it will be wide)
    back = pickle.loads(pickle.dumps(narrow, pickle.HIGHEST_PROTOCOL)).wide()   # (spilled narrow)
    for field, got in zip(block._fields, back):
        want = getattr(block, field)
        if isinstance(want, pa.Array):
            assert got.equals(want), field
        else:
            assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), field


def test_blocks_of_sessions_pickle_to_a_fraction_of_their_columns():
    """Rows of proto-sessions (starts over a week, ends a gap later, small totals and counts)
    pickle to less than a third of their columns' bytes."""
    rng = np.random.default_rng(7)
    rows, week, gap = 4096, 7 * 24 * 3600 * 1000, 600_000
    start = np.sort(rng.integers(0, week, rows))
    block = blocks_module.GroupBlock(
        np.full(rows, 3 << 32 | 1, np.int64), pa.array([b"k%d" % i for i in range(16)], pa.large_binary()),
        np.arange(16, dtype=np.uint32), pa.array(["k%d" % i for i in range(16)]), rng.integers(0, 16, rows),
        start, start + gap, rng.integers(0, 100, rows), np.ones(rows, np.int64), start.copy())
    assert len(pickle.dumps(block, pickle.HIGHEST_PROTOCOL)) * 3 < block.nbytes()


@pytest.mark.parametrize("span", [0, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**62])
@pytest.mark.parametrize("lo", [_I64.min, -5, 0, _I64.max - 2**62])
def test_a_column_narrows_to_the_least_type_that_holds_its_span(span, lo):
    column = np.array([lo, lo + span, lo + span // 2], np.int64)
    packed = columns.narrowed(column)
    assert np.array_equal(columns.widened(packed), column)
    want = np.uint8 if span < 2**8 else np.uint16 if span < 2**16 else np.uint32 if span < 2**32 else None
    assert (packed is column) if want is None else packed[1].dtype == want
