"""The generated stream of streaming.py, its reference answers, and the Spark source that emits it.

Only the standard library is imported at module level: the Beam worker imports this module under
Apache Beam's virtualenv too (its timing DoFn lives here so that Beam pickles it by reference), and
PySpark's Python workers import it to run the stream source. numpy, pyarrow and pyspark are
imported by the functions that need them.

The stream. Event i of N (0 <= i < N) with K keys is a pure function of (i, N, K):

    base(i)   = T0 + i * WEEK // N                  (ms; one week from 2023-11-14T00:00Z, in order)
    ts(i)     = base(i) + jitter(i)                 jitter(i) in [0, 2000) ms: forward only
    value(i)  = 1 + h(i, VALUE) % 100
    key(i)    = "key-%05d" % (h(visit(i), KEY) % K)  visit(i) = (i // SLOTS // VISIT_EVENTS) * SLOTS
                                                                + i % SLOTS

h is splitmix64's finaliser (the same in pure Python and in numpy, so every contender computes
the same events). SLOTS (20) visits are in progress at once; event i belongs to slot i % SLOTS and
each slot's run of VISIT_EVENTS (20) consecutive events is one visit of one key. So each key's
events come in bursts: a visit is 20 events SLOTS events apart (about 6 s of event time at 2 M
events a week, 2 minutes per visit), and a key's visits are hashed over the week (at 1,000 keys
about 100 visits per key, mostly hours apart; at 10,000 keys about 10), so Sessions(10 minutes)
finds about one session per visit, fewer where two visits of a key fall within 10 minutes.

Nothing is ever late for a 2 s watermark delay: jitter only moves an event forward, by less than
2 s, and base() never decreases, so for j < i, ts(j) < base(j) + 2 s <= base(i) + 2 s <= ts(i) + 2 s,
i.e. every event is later than (the largest event time before it) - 2 s, which is Spark's
watermark with withWatermark("ts", "2 seconds") (and later than Beam's TestStream watermark here,
the same rule, and than PeriodicImpulse's, the next impulse's base time).

Micro-batches: the stream is read in event-index order, B events per batch (the last one smaller).
The Spark source (`spark_source_class`) admits exactly B events per batch (ReadMaxRows(B) as its
default read limit, AvailableNow supported), and, because Spark's append mode only emits a window
once the watermark has passed it, ends with two end-of-stream rows: key END_KEY at END_TS_MS (a
day after the week) in the last data batch, and another in a batch of its own (the flush batch),
in which the watermark has passed every window of the week. The end-of-stream key's own window is
left out of every checksum. headrace's PeriodicImpulse and Beam's TestStream reach the end of
time by themselves instead.
"""

from __future__ import annotations

import json
import os
import threading
import time
import zlib
from typing import Any, Dict, Iterator, List, Optional, Tuple

# ---- what is computed ---------------------------------------------------------------------------

T0_MS = 1_699_920_000_000          # 2023-11-14T00:00:00Z
WEEK_MS = 7 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000              # FixedWindows(3600) / window("ts", "1 hour")
GAP_MS = 600 * 1000                # Sessions(600) / session_window("ts", "10 minutes")
WATERMARK_DELAY_MS = 2000          # withWatermark("ts", "2 seconds")
JITTER_MS = 2000                   # ts(i) - base(i) in [0, JITTER_MS)
EARLY_FIRING_S = 60                # sessions: early panes every minute of processing time
ALLOWED_LATENESS_S = 60            # sessions: how long a session waits for late data (none comes)
SLOTS = 20                         # visits in progress at once
VISIT_EVENTS = 20                  # events per visit
END_KEY = "~end-of-stream"         # the Spark source's end-of-stream rows (not in any checksum)
END_TS_MS = T0_MS + WEEK_MS + 24 * 3600 * 1000

PIPELINES = ("fixed", "sessions")
PIPELINE_LABELS = {"fixed": "FixedWindows(1 hour), default trigger",
                   "sessions": "Sessions(10 minutes), early every 1 min + late"}
DIGEST_MOD = 2 ** 63
COUNTER_NAMESPACE = "streaming_bench"
REFERENCE_VERSION = 1              # bump when the stream or the reference changes

_M64 = (1 << 64) - 1
_SALT_KEY = 0x3C6EF372FE94F82B
_SALT_VALUE = 0xA54FF53A5F1D36F1
_SALT_JITTER = 0x510E527FADE682D1


def window_digest(key: str, start_ms: int, total: int) -> int:
    """One output's fingerprint; a run's digest is the sum over its outputs, mod DIGEST_MOD."""
    return zlib.crc32(f"{key}|{start_ms}|{total}".encode("utf-8"))


def key_name(code: int) -> str:
    return f"key-{code:05d}"


# ---- the events, in pure Python -----------------------------------------------------------------

def mix64(x: int) -> int:
    """splitmix64's finaliser of a 64-bit integer."""
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def event(i: int, n: int, keys: int) -> Tuple[str, int, int]:
    """(key, value, ts_ms) of event i of n with `keys` keys (see the module doc)."""
    visit = (i // SLOTS // VISIT_EVENTS) * SLOTS + i % SLOTS
    key = key_name(mix64(visit ^ _SALT_KEY) % keys)
    value = 1 + mix64(i ^ _SALT_VALUE) % 100
    ts_ms = T0_MS + i * WEEK_MS // n + mix64(i ^ _SALT_JITTER) % JITTER_MS
    return key, value, ts_ms


def base_ms(i: int, n: int) -> int:
    """Event i's time before its jitter (the time PeriodicImpulse gives it)."""
    return T0_MS + i * WEEK_MS // n


def batch_bounds(n: int, batch: int) -> List[Tuple[int, int]]:
    """[lo, hi) of each micro-batch of the stream."""
    return [(lo, min(lo + batch, n)) for lo in range(0, n, batch)]


# ---- the events, with numpy ---------------------------------------------------------------------

def _mix64_np(x):
    import numpy as np

    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def events_np(lo: int, hi: int, n: int, keys: int):
    """Events lo..hi-1 as numpy arrays (key code int64, value int64, ts_ms int64)."""
    import numpy as np

    with np.errstate(over="ignore"):
        i = np.arange(lo, hi, dtype=np.uint64)
        s = np.uint64(SLOTS)
        visit = (i // s // np.uint64(VISIT_EVENTS)) * s + i % s
        key = (_mix64_np(visit ^ np.uint64(_SALT_KEY)) % np.uint64(keys)).astype(np.int64)
        value = (np.uint64(1) + _mix64_np(i ^ np.uint64(_SALT_VALUE)) % np.uint64(100)).astype(np.int64)
        jitter = (_mix64_np(i ^ np.uint64(_SALT_JITTER)) % np.uint64(JITTER_MS)).astype(np.int64)
    base = T0_MS + (np.arange(lo, hi, dtype=np.int64) * WEEK_MS) // n
    return key, value, base + jitter


# ---- the reference answer -----------------------------------------------------------------------

def _checksum(key, start, total) -> Dict[str, int]:
    digest = 0
    for k, s, t in zip(key.tolist(), start.tolist(), total.tolist()):
        digest += window_digest(key_name(k), s, t)
    return {"windows": int(len(key)), "total": int(total.sum()), "digest": digest % DIGEST_MOD}


def reference(n: int, keys: int, cache_dir: Optional[str] = None) -> Dict[str, Any]:
    """The expected checksums of both pipelines on the stream (n, keys), with numpy, and facts
    about the stream; cached as JSON in cache_dir.

    fixed: window start = ts - ts % 1 hour. sessions: per key, in timestamp order, a new session
    starts when the gap to the previous event is >= 10 minutes (Beam's Sessions: windows
    [t, t + gap) merge when they overlap); a session's start is its first event's timestamp.
    """
    import numpy as np

    path = os.path.join(cache_dir, f"reference-{n}-{keys}.json") if cache_dir else None
    if path and os.path.exists(path):
        with open(path) as fh:
            cached = json.load(fh)
        if cached.get("version") == REFERENCE_VERSION:
            return cached  # type: ignore[no-any-return]
    key, value, ts = events_np(0, n, n, keys)
    late = ts < np.maximum.accumulate(ts) - WATERMARK_DELAY_MS
    assert not late.any(), "an event behind the 2 s watermark delay"

    start = ts - ts % HOUR_MS
    group = key * (WEEK_MS // HOUR_MS + 2) + (start - T0_MS) // HOUR_MS
    _, first, inverse = np.unique(group, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=value).astype(np.int64)
    fixed = _checksum(key[first], start[first], sums)

    order = np.lexsort((ts, key))
    k, t, v = key[order], ts[order], value[order]
    same_key_gap = np.where(k[1:] == k[:-1], t[1:] - t[:-1], GAP_MS)
    new = np.ones(len(k), dtype=bool)
    new[1:] = same_key_gap >= GAP_MS
    starts = np.flatnonzero(new)
    sessions = _checksum(k[starts], t[starts], np.add.reduceat(v, starts))
    per_key = np.bincount(k[starts], minlength=keys)
    ref = {"version": REFERENCE_VERSION, "events": n, "keys": keys, "fixed": fixed, "sessions": sessions,
           "keys_seen": int((per_key > 0).sum()),
           # consecutive events of a key exactly one gap apart: Spark's session_window merges them
           "pairs_exactly_gap_apart": int((same_key_gap[k[1:] == k[:-1]] == GAP_MS).sum()),
           "sessions_per_key_median": float(np.median(per_key[per_key > 0])),
           "events_per_session_median": float(np.median(np.diff(np.append(starts, len(k)))))}
    if path:
        os.makedirs(cache_dir, exist_ok=True)  # type: ignore[arg-type]
        with open(path, "w") as fh:
            json.dump(ref, fh, indent=1)
    return ref


# ---- the Spark source ---------------------------------------------------------------------------

SOURCE_NAME = "bench_stream"
SOURCE_DDL = "key string, value long, ts timestamp"


def stream_arrow_batch(lo: int, hi: int, n: int, keys: int, with_end: bool):
    """Events lo..hi-1 (plus an end-of-stream row) as one pyarrow RecordBatch of SOURCE_DDL."""
    import numpy as np
    import pyarrow as pa

    key, value, ts = events_np(lo, hi, n, keys)
    names = pa.array([key_name(c) for c in range(keys)], pa.string()).take(pa.array(key))
    if with_end:
        names = pa.concat_arrays([names, pa.array([END_KEY], pa.string())])
        value = np.append(value, 0)
        ts = np.append(ts, END_TS_MS)
    return pa.RecordBatch.from_arrays(
        [names, pa.array(value, pa.int64()), pa.array(ts * 1000, pa.timestamp("us", tz="UTC"))],
        names=["key", "value", "ts"])


def spark_source_class() -> Any:
    """The pyspark DataSource of the stream (options: events, keys, batch, partitions).

    Offsets are {"pos": p}: positions 0..N-1 are the events, N the end-of-stream row of the last
    data batch, N + 1 the flush batch's. latestOffset admits at most `batch` events (its default
    read limit, ReadMaxRows(batch)); with ReadAllAvailable it would admit the rest at once. Each
    batch is read as `partitions` input partitions of consecutive events, as Arrow record batches.
    """
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow,
    )

    class _Part(InputPartition):  # type: ignore[misc]
        def __init__(self, lo: int, hi: int, end_rows: int) -> None:
            self.lo, self.hi, self.end_rows = lo, hi, end_rows

    class BenchStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc]
        def __init__(self, options: Dict[str, str]) -> None:
            self.n = int(options["events"])
            self.keys = int(options["keys"])
            self.batch = int(options["batch"])
            self.n_parts = int(options.get("partitions", "2"))

        def initialOffset(self) -> Dict[str, int]:
            return {"pos": 0}

        def getDefaultReadLimit(self) -> Any:
            return ReadMaxRows(self.batch)

        def prepareForTriggerAvailableNow(self) -> None:
            pass  # the stream is all there from the start

        def latestOffset(self, start: Dict[str, int], limit: Any) -> Dict[str, int]:
            pos, n = start["pos"], self.n
            if pos < n:
                end = n if isinstance(limit, ReadAllAvailable) else min(n, pos + limit.max_rows)
                return {"pos": end + 1 if end == n else end}
            return {"pos": min(pos + 1, n + 2)}

        def partitions(self, start: Dict[str, int], end: Dict[str, int]) -> List[Any]:
            lo, hi = start["pos"], end["pos"]
            ev_lo, ev_hi = min(lo, self.n), min(hi, self.n)
            end_rows = max(0, hi - max(lo, self.n))
            if ev_hi <= ev_lo:
                return [_Part(ev_lo, ev_lo, end_rows)] if end_rows else []
            parts = max(1, min(self.n_parts, ev_hi - ev_lo))
            cuts = [ev_lo + (ev_hi - ev_lo) * j // parts for j in range(parts + 1)]
            return [_Part(a, b, end_rows if j == parts - 1 else 0)
                    for j, (a, b) in enumerate(zip(cuts[:-1], cuts[1:]))]

        def read(self, partition: Any) -> Iterator[Any]:
            p = partition
            for lo in range(p.lo, max(p.hi, p.lo + 1), 65536):
                hi = min(p.hi, lo + 65536)
                last = hi >= p.hi
                if hi > lo or (last and p.end_rows):
                    yield stream_arrow_batch(lo, hi, self.n, self.keys, last and p.end_rows > 0)

        def commit(self, end: Dict[str, int]) -> None:
            pass

    class BenchStreamSource(DataSource):  # type: ignore[misc]
        @classmethod
        def name(cls) -> str:
            return SOURCE_NAME

        def schema(self) -> str:
            return SOURCE_DDL

        def streamReader(self, schema: Any) -> Any:
            return BenchStreamReader(self.options)

    return BenchStreamSource


def batch_events_of_offsets(start: Any, end: Any, n: int) -> int:
    """Events of the stream in a Spark batch of the bench source, from its progress's offsets."""
    a = (json.loads(start) or {}).get("pos", 0) if start else 0
    b = (json.loads(end) or {}).get("pos", 0) if end else 0
    return max(0, min(b, n) - min(a, n))


# ---- per-batch timings of Beam's TestStream run (pickled by reference) -------------------------

_BATCH_SEEN: Dict[int, float] = {}
_BATCH_LOCK = threading.Lock()


def batch_marks() -> Dict[int, float]:
    """{batch index: perf_counter when its first event reached the marking step} of this process."""
    with _BATCH_LOCK:
        return dict(_BATCH_SEEN)


def mark_batch(batch_index: int) -> None:
    if batch_index not in _BATCH_SEEN:
        with _BATCH_LOCK:
            _BATCH_SEEN.setdefault(batch_index, time.perf_counter())


# ---- Beam's checksum, folded in this process (pickled by reference) -----------------------------

_PANES: Dict[str, int] = {"windows": 0, "total": 0, "digest": 0, "early": 0, "on_time": 0, "late": 0,
                          "unknown": 0}


def record_pane(key: str, start_ms: int, total: int, timing: int) -> None:
    """Folds one output pane into this process's checksum (the Beam worker's alternative to
    Metrics counters, which Beam's streaming DirectRunner under-counts): ON_TIME panes
    (timing 1) go into the checksum, every pane into the count of its timing."""
    with _BATCH_LOCK:
        _PANES[("early", "on_time", "late")[timing] if 0 <= timing < 3 else "unknown"] += 1
        if timing == 1:
            _PANES["windows"] += 1
            _PANES["total"] += total
            _PANES["digest"] += window_digest(key, start_ms, total)


def recorded_panes() -> Tuple[Dict[str, int], Dict[str, int]]:
    """(checksum, pane counts) of the panes record_pane saw in this process."""
    with _BATCH_LOCK:
        p = dict(_PANES)
    return ({"windows": p["windows"], "total": p["total"], "digest": p["digest"] % DIGEST_MOD},
            {k: p[k] for k in ("early", "on_time", "late", "unknown")})
