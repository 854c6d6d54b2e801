"""Records as they cross Spark: the C pickler (cloudpickle for what it cannot pickle), and one
output's elements of a bundle packed into one record."""

from __future__ import annotations

import pickle
from typing import Any, Callable, Dict, Iterable, Iterator, List, Tuple

import cloudpickle
from pyspark.serializers import FramedSerializer, pack_long


class FastPickleSerializer(FramedSerializer):
    """Serialises RDD records with the C pickler, falling back to cloudpickle for what it cannot
    pickle (PySpark's default pickles every record with cloudpickle, which is several times slower)."""

    def dumps(self, obj: Any) -> bytes:
        """`obj` pickled."""
        try:
            return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)
        except Exception:
            return cloudpickle.dumps(obj, pickle.HIGHEST_PROTOCOL)

    def loads(self, obj: bytes, encoding: str = "bytes") -> Any:
        """The object pickled in `obj`."""
        return pickle.loads(obj, encoding=encoding)


_PACKER = FastPickleSerializer()


def pack(values: Any) -> bytes:
    """Values pickled together (one output's elements of one bundle), for `unpack`."""
    return _PACKER.dumps(values)


def unpack(record: Tuple[int, bytes]) -> List[Any]:
    """The values of a record (index, pack(values))."""
    return pickle.loads(record[1])


#: the bytes a shuffle chunk aims at: under half of the smallest G1 heap region (1 MiB), so the
#: JVM reads and writes it as an ordinary young object, never a "humongous" one
SHUFFLE_CHUNK_BYTES = 256 * 1024


def shuffle_chunks(n: int, partition_of: Callable[[Any], int], dumps: Callable[[Any], bytes],
                   _split: int, records: Iterable[Tuple[Any, Any]]) -> Iterator[bytes]:
    """A map task's (key, value) records as the JVM's shuffle takes them (`PairwiseRDD`): the
    (partition, chunk) pairs of `partition_chunks`, the partition packed as PySpark packs it."""
    for p, data in partition_chunks(n, partition_of, dumps, records):
        yield pack_long(p)
        yield data


def partition_chunks(n: int, partition_of: Callable[[Any], int], dumps: Callable[[Any], bytes],
                     records: Iterable[Tuple[Any, Any]]) -> Iterator[Tuple[int, bytes]]:
    """(partition, chunk) pairs of (key, value) records, a chunk a pickled list (`dumps`) of
    records of one partition `partition_of(key) % n`, in their order, of about
    `SHUFFLE_CHUNK_BYTES` while the records' sizes hold steady: the records per chunk follow
    the bytes per record of the last chunk, and at most double from one chunk to the next (the
    first chunks are small while the sizes are unknown); a record larger than that is a chunk
    alone. Sizes that jump after many small records can still make one chunk larger (records
    are not measured one by one: that would pickle each alone)."""
    buckets: Dict[int, List[Any]] = {}
    per = 1
    for kv in records:
        p = partition_of(kv[0]) % n
        items = buckets.get(p)
        if items is None:
            items = buckets[p] = []
        items.append(kv)
        if len(items) >= per:
            data = dumps(items)
            buckets[p] = []
            yield p, data
            per = _next_per(per, len(items), len(data))
    for p, items in buckets.items():
        if items:
            yield p, dumps(items)


def sized_chunks(records: Iterable[Any], dumps: Callable[[Any], bytes]) -> Iterator[bytes]:
    """Consecutive records as pickled lists (`dumps`) of about `SHUFFLE_CHUNK_BYTES`, cut as
    `partition_chunks` cuts one partition's."""
    items: List[Any] = []
    per = 1
    for r in records:
        items.append(r)
        if len(items) >= per:
            data = dumps(items)
            yield data
            per = _next_per(per, len(items), len(data))
            items = []
    if items:
        yield dumps(items)


def _next_per(per: int, count: int, size: int) -> int:
    """The records of the next chunk: as many as `SHUFFLE_CHUNK_BYTES` holds at the last chunk's
    bytes per record (`count` records in `size` bytes), at most twice the last's `per`."""
    return max(1, min(2 * per, count * SHUFFLE_CHUNK_BYTES // max(size, 1)))
