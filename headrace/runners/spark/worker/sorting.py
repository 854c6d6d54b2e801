"""A shuffled partition's (key, value) records sorted by key, for the batch runner's groupings
(RDDs and Spark Connect's frames alike).

The records are held in memory up to a budget of their estimated bytes (90% of
`spark.python.worker.memory`, the share PySpark's own sort takes), measured as Spark's
`SizeTracker` measures a collection: a few records walked deep (`kit.partial.deep_size`) at
counts growing geometrically, their mean size times the count in between. Beyond the budget a
sorted run is spilled to a file in Spark's local directories, pickled with the C pickler, and
the runs are merged at the end.

PySpark's `ExternalSorter` (which `RDD.repartitionAndSortWithinPartitions` uses) bounds the
whole worker process instead: once its resident size passes the budget, it spills at every 5%
of growth, each run pickled with cloudpickle and compressed. A reused Python worker that a map
side has already grown (and that the allocator does not shrink) then spills a small run every few
thousand records of a partition that would fit many times over, and merges dozens of runs.
"""

from __future__ import annotations

import heapq
import os
import pickle
import struct
import tempfile
from itertools import islice
from operator import itemgetter
from typing import IO, Any, Iterable, Iterator, List, Tuple

from headrace.runners.kit.partial import deep_size
from headrace.runners.spark.worker.packing import pack

_KEY = itemgetter(0)
_BATCH = 1000          # records taken from the input at a time, and pickled together in a run
_SAMPLE = 64           # records measured per sample of their mean size (shared objects counted once)
_LENGTH = struct.Struct("<I")


def budget_bytes(setting: str) -> float:
    """The bytes of records a sort holds in memory under `spark.python.worker.memory` =
    `setting` ("512m", "2g", ...): 90% of it, as PySpark's sort (512 MiB if unreadable)."""
    s = setting.strip().lower().rstrip("b")
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    try:
        n = float(s[:-1]) * units[s[-1]] if s and s[-1] in units else float(s) * (1 << 20)
    except ValueError:
        n = 512 << 20
    return 0.9 * n


def sort_records(records: Iterable[Tuple[Any, Any]], budget: float) -> Iterator[Tuple[Any, Any]]:
    """`records` sorted by key (stable), in memory up to `budget` estimated bytes of them, in
    runs spilled to disk and merged beyond it (see the module docstring)."""
    it = iter(records)
    run: List[Tuple[Any, Any]] = []
    spilled: List[IO[bytes]] = []
    mean = 0.0            # the records' mean size in bytes, last measured
    measured_at = 0       # the run's length when it was
    while True:
        chunk = list(islice(it, _BATCH))
        run.extend(chunk)
        if len(run) >= 2 * measured_at or not measured_at:
            mean = _mean_size(chunk or run)
            measured_at = len(run)
        if len(run) * (mean + 8) > budget and len(run) > 1:   # 8: the list's slot
            spilled.append(_spill(run))
            run = []
            measured_at = 0
        if len(chunk) < _BATCH:
            break
    run.sort(key=_KEY)
    if not spilled:
        return iter(run)
    return heapq.merge(*(_read(f) for f in spilled), iter(run), key=_KEY)


def _mean_size(records: List[Tuple[Any, Any]]) -> float:
    """The mean deep size of a few of `records`, spread over them (0 for none)."""
    if not records:
        return 0.0
    step = max(1, len(records) // _SAMPLE)
    picked = records[::step][:_SAMPLE]
    seen: set = set()   # (one for the sample: what records share, such as windows, counts once)
    total = 0
    for r in picked:
        total += deep_size(r, seen, 2_000)[0]
    return total / len(picked)


def _spill(run: List[Tuple[Any, Any]]) -> IO[bytes]:
    """The run sorted and written to an anonymous file in Spark's local directories, rewound."""
    run.sort(key=_KEY)
    local = os.environ.get("SPARK_LOCAL_DIRS", "").split(",")[0] or None
    f = tempfile.TemporaryFile(prefix="headrace-sort-", dir=local if local and os.path.isdir(local) else None)
    for i in range(0, len(run), _BATCH):
        data = pack(run[i:i + _BATCH])
        f.write(_LENGTH.pack(len(data)))
        f.write(data)
    f.seek(0)
    return f


def _read(f: IO[bytes]) -> Iterator[Tuple[Any, Any]]:
    """The records of a spilled run, in order; the file is closed (and gone) at its end."""
    with f:
        while True:
            head = f.read(_LENGTH.size)
            if not head:
                return
            yield from pickle.loads(f.read(_LENGTH.unpack(head)[0]))
