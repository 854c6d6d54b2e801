"""The rows of a streaming query: one schema for everything that flows between its operators.

A pipeline runs as one Structured Streaming query in which every PCollection shares one stream
of rows (a *multiplexed* stream): each operator handles the rows of the PCollections it reads
and passes the others on, so a PCollection read by several branches is computed once and no
stateful operator is duplicated. Columns:

* `kind`  routing at the next stateful operator: CTL (a control row, sorted first in every
  partition, or a side-input element, sent to every partition's control key), KEYED (an
  elements for a grouping or a side step, `key` = its index + bucket), PASS (everything
  else: elements for later operators, reports for the driver);
* `pc`    the PCollection id of an element, or CTL_PC / REPORT_PC / SIDE_PC / READ_PC, or the pseudo
  id of elements a side step released (`released_pc`);
* `key`   a grouping's index and bucket of keys (KEYED, `bucket_key`; a side step's: its index
  and spread key), a partition key (CTL, PASS), else empty;
* `bundle`, `seq`  the elements' bundle and the first one's place in it (KEYED rows carry each
  element's own; a grouping takes each bundle of a key in one call, in order, as the local
  runner does);
* `payload` the pickled elements: a list of WindowedValues (in order) for CTL and PASS rows;
  for KEYED rows {key bytes: [(bundle, seq, WindowedValue)]} (a lifted combine's: {key bytes:
  (key, [(window, accumulator, timestamp, inputs)])}; a side step's: [(bundle, seq,
  WindowedValue)]); or control values, or a report.
"""

from __future__ import annotations

import pickle
import struct
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple

CTL = 0
KEYED = 1
PASS = 2

CTL_PC = -1
REPORT_PC = -2
SIDE_PC = -3          # side-input contents for a stage of the next level (see `processor`)
READ_PC = -4          # a range of an unbounded source, read by the first level (`source`)


def released_pc(g: int) -> int:
    """The pseudo PCollection id of the elements side step `g` releases to its stage."""
    return -1000 - g

SCHEMA_DDL = "kind int, pc int, key binary, bundle long, seq long, payload binary"
SOURCE_DDL = SCHEMA_DDL + ", clock timestamp"
COLUMNS = ("kind", "pc", "key", "bundle", "seq", "payload")

Row = Tuple[int, int, bytes, int, int, bytes]


def spark_schema() -> Any:
    """The rows' StructType (pyspark is imported only here)."""
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StructField, StructType
    return StructType([StructField("kind", IntegerType()), StructField("pc", IntegerType()),
                       StructField("key", BinaryType()), StructField("bundle", LongType()),
                       StructField("seq", LongType()), StructField("payload", BinaryType())])


class Columns:
    """The output columns of one partition of a level (`stages`): PASS rows without a key are
    spread over the next operator's partitions (`ctl_keys`)."""

    def __init__(self, ctl_keys: Optional[Sequence[bytes]]) -> None:
        self.cols: Dict[str, List[Any]] = {c: [] for c in COLUMNS}
        self.spread = tuple(ctl_keys) if ctl_keys else (b"",)
        self.size = 0

    def add(self, kind: int, pc: int, key: Optional[bytes], bundle: int, seq: int,
            payload: bytes) -> None:
        """Adds a row (`key` None: the next of the spread keys)."""
        c = self.cols
        c["kind"].append(kind)
        c["pc"].append(pc)
        c["key"].append(key if key is not None else self.spread[self.size % len(self.spread)])
        c["bundle"].append(bundle)
        c["seq"].append(seq)
        c["payload"].append(payload)
        self.size += 1


def grouping_key(g: int, key_bytes: bytes) -> bytes:
    """The `key` column of an element for grouping `g` (its index, then the key's bytes)."""
    return struct.pack(">H", g) + key_bytes


def bucket_key(g: int, key_bytes: bytes, buckets: int) -> bytes:
    """The `key` column of grouping `g`'s rows for the key `key_bytes`: its index, then the
    bucket of keys it belongs to (one of `buckets`, by a hash that every process computes
    alike). A stateful operator keeps a bucket's keys in one state value, so a micro-batch costs
    a few state calls per bucket rather than per key."""
    return struct.pack(">HI", g, zlib.crc32(key_bytes) % buckets)


def grouping_of(key: bytes) -> int:
    """The grouping index of a KEYED row's key."""
    return int(struct.unpack_from(">H", key)[0])


def add_items(batches: Dict[int, List[Tuple[int, Any]]],
              items: List[Tuple[int, int, Any]]) -> None:
    """Adds a KEYED row's (bundle, place, element) items to {bundle: [(place, element)]}."""
    for bundle, seq, wv in items:
        lst = batches.get(bundle)
        if lst is None:
            lst = batches[bundle] = []
        lst.append((seq, wv))


def dumps(obj: Any) -> bytes:
    """Pickles a control value or a report."""
    return pickle.dumps(obj, pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """Unpickles what `dumps` made."""
    return pickle.loads(data)
