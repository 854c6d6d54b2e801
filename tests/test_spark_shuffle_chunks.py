"""A grouping's shuffle as the batch runner hands it to the JVM (`worker.packing.shuffle_chunks`):
every record in the chunk of its partition, in order, chunks of bounded bytes, so that the JVM
never holds one as a G1 "humongous" array."""

from __future__ import annotations

import pickle
import random
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headrace.runners.spark.worker.packing import SHUFFLE_CHUNK_BYTES, shuffle_chunks, sized_chunks


def dumps(obj):
    return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)


def chunks_of(records, n):
    out = list(shuffle_chunks(n, hash, dumps, 0, iter(records)))
    assert len(out) % 2 == 0
    return [(struct.unpack("!q", out[i])[0], out[i + 1]) for i in range(0, len(out), 2)]


@settings(max_examples=100, deadline=None)
@given(sizes=st.lists(st.sampled_from([0, 10, 3_000, 60_000, 200_000]), max_size=300),
       n=st.integers(1, 5), seed=st.integers(0, 1000))
def test_every_record_goes_in_order_to_its_partition(sizes, n, seed):
    rnd = random.Random(seed)
    records = [(rnd.randrange(50), (i, b"x" * size)) for i, size in enumerate(sizes)]
    got = {p: [] for p in range(n)}
    for p, chunk in chunks_of(records, n):
        items = pickle.loads(chunk)
        assert items and all(hash(k) % n == p for k, _ in items)
        got[p].extend(items)
    assert got == {p: [r for r in records if hash(r[0]) % n == p] for p in range(n)}


@pytest.mark.parametrize("sizes", [[10], [3_000], [60_000], [200_000], [400_000],
                                   [0, 200_000, 200_000, 200_000],          # small first
                                   [50_000, 50_000, 50_000, 1_200, 300],    # blocks and a key's tail
                                   [40_000, 20_000, 5_000, 80_000]])
def test_chunks_stay_within_twice_their_aim_while_sizes_hold(sizes):
    """Records of steady sizes (one size, or a repeating pattern of sizes, as columnar blocks
    of full and partial keys come) go in chunks of at most twice `SHUFFLE_CHUNK_BYTES`, or one
    record alone."""
    records = [(i % 3, b"x" * sizes[i % len(sizes)]) for i in range(600)]
    for _, chunk in chunks_of(records, 3):
        assert len(chunk) <= 2 * SHUFFLE_CHUNK_BYTES or len(pickle.loads(chunk)) == 1


def test_small_records_go_many_to_a_chunk():
    records = [(i % 3, i) for i in range(200_000)]
    chunks = chunks_of(records, 3)
    assert len(chunks) < 60   # (about 1.2 MB of pickled records: a few chunks per partition)
    assert sum(len(pickle.loads(c)) for _, c in chunks) == len(records)


def test_a_few_large_records_among_small_ones_do_not_make_a_chunk_of_many():
    records = [(0, b"y" * (20 if i % 50 else 200_000)) for i in range(2_000)]
    assert max(len(c) for _, c in chunks_of(records, 1)) <= 2 * SHUFFLE_CHUNK_BYTES


@pytest.mark.parametrize("sizes", [[10], [60_000], [0, 200_000, 200_000], [50_000, 1_200, 300]])
def test_consecutive_records_go_in_order_in_chunks_of_bounded_bytes(sizes):
    """`sized_chunks` (a chain's rows over Spark Connect) cuts one stream as a partition's."""
    records = [(i, b"x" * sizes[i % len(sizes)]) for i in range(500)]
    chunks = list(sized_chunks(iter(records), dumps))
    assert [r for c in chunks for r in pickle.loads(c)] == records
    for chunk in chunks:
        assert len(chunk) <= 2 * SHUFFLE_CHUNK_BYTES or len(pickle.loads(chunk)) == 1
    if sizes == [10]:
        assert len(chunks) < 20   # small records many to a chunk
