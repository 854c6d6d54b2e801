"""Shared helpers of spark_windowed_sum.py: the input data, the reference answer, memory sampling.

Only the standard library is imported at module level, because the contender worker imports the
constants and the digest from here under Apache Beam's virtualenv too; numpy, pyarrow and psutil
are imported by the functions that need them.

The input is one "universe" of events, generated once with numpy (fixed seed) in shuffled order;
every dataset the benchmark reads (the main one, Beam's smaller one, the memory-check ones) is a
prefix of it, i.e. a uniform random subset of the same week of bursty activity. Each dataset is a
directory of Parquet files `part-NNNNN.parquet` plus `_meta.json` (written last, so a directory
without it is incomplete) and `_reference.json` (the reference checksums, cached).
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import sys
import threading
import time
import zlib
from typing import Any, Dict, List, Optional, Tuple

# ---- what is computed ---------------------------------------------------------------------------

WEEK_START_MS = 1_699_920_000_000  # 2023-11-14T00:00:00Z
WEEK_MS = 7 * 24 * 3600 * 1000
HOUR_MS = 3600 * 1000              # FixedWindows(3600)
GAP_MS = 600 * 1000                # Sessions(600)
PIPELINES = ("fixed", "sessions")
PIPELINE_LABELS = {"fixed": "FixedWindows(1 hour)", "sessions": "Sessions(10 minutes)"}
DIGEST_MOD = 2 ** 63
COUNTER_NAMESPACE = "spark_windowed_sum"


def window_digest(key: str, start_ms: int, total: int) -> int:
    """One output's fingerprint; a run's digest is the sum over its outputs, mod DIGEST_MOD."""
    return zlib.crc32(f"{key}|{start_ms}|{total}".encode("utf-8"))


# ---- the input ----------------------------------------------------------------------------------

GENERATOR_VERSION = 1       # bump when generate_events changes, so cached data is not reused
REFERENCE_VERSION = 2       # bump when reference_checksums changes, so cached answers are not reused
FILES_PER_DATASET = 8
ROW_GROUP_ROWS = 256 * 1024
VISITS_PER_KEY = (100, 300)  # visits of each key over the week, uniform in this range
VISIT_SIZE_SIGMA = 0.8       # events per visit ~ lognormal weight (sigma) of the key's share
STEP_MEDIAN_MS = 6_000       # time between consecutive events of a visit: lognormal, median 6 s,
STEP_SIGMA = 1.0             # clipped to [1 s, 2 min]
STEP_RANGE_MS = (1_000, 120_000)
ACTIVE_SHARE = 0.85          # a key's visits and the gaps between them span ~85% of the week
GAP_SIGMA = 0.5              # gaps between visits: lognormal; mean sized to fill ACTIVE_SHARE


def _segment_cumsum(x, segment_first, segment_of):
    """Cumulative sums of x restarting at each segment; x must be 0 at every segment's first index."""
    import numpy as np

    c = np.cumsum(x)
    return c - c[np.minimum(segment_first, len(x) - 1)][segment_of]


def generate_events(n: int, num_keys: int, seed: int):
    """n bursty events as numpy arrays (key code int32, value int64, ts_ms int64), shuffled.

    Each key has 100-300 visits; a visit is a run of events 1 s .. 2 min apart (median 6 s); the
    gaps between a key's visits are lognormal with a mean of tens of minutes (most well above
    10 minutes), so Sessions(10 min) finds roughly one session per visit. Vectorised throughout.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    visits = rng.integers(VISITS_PER_KEY[0], VISITS_PER_KEY[1] + 1, num_keys)
    visit_key = np.repeat(np.arange(num_keys), visits)
    num_visits = len(visit_key)
    key_first_visit = np.cumsum(visits) - visits

    weight = rng.lognormal(0.0, VISIT_SIZE_SIGMA, num_visits)
    count = rng.multinomial(n, weight / weight.sum())
    event_visit = np.repeat(np.arange(num_visits), count)
    visit_first = np.cumsum(count) - count

    # each event's offset within its visit: the running sum of the steps since the visit's first
    step = np.clip(rng.lognormal(np.log(STEP_MEDIAN_MS), STEP_SIGMA, n), *STEP_RANGE_MS).astype(np.int64)
    step[visit_first[count > 0]] = 0
    offset = _segment_cumsum(step, visit_first, event_visit)
    duration = np.zeros(num_visits, dtype=np.int64)
    has_events = count > 0
    duration[has_events] = offset[(visit_first + count - 1)[has_events]]

    # gaps between visits, sized per key so that the key's activity spans ~ACTIVE_SHARE of the week
    active = np.bincount(visit_key, weights=duration, minlength=num_keys)
    mean_gap = np.maximum(ACTIVE_SHARE * WEEK_MS - active, 0.0) / visits
    mean_gap = np.maximum(mean_gap, 2 * GAP_MS)
    gap = rng.lognormal(0.0, GAP_SIGMA, num_visits) * (mean_gap / np.exp(GAP_SIGMA ** 2 / 2))[visit_key]
    advance = gap.astype(np.int64)
    advance[1:] += duration[:-1]              # the previous visit's length plus the gap after it
    advance[key_first_visit] = 0
    visit_start = _segment_cumsum(advance, key_first_visit, visit_key)

    last_visit = key_first_visit + visits - 1
    span = (visit_start[last_visit] + duration[last_visit]).astype(np.float64)
    scale = np.minimum(1.0, 0.98 * WEEK_MS / np.maximum(span, 1.0))
    shift = rng.uniform(0.0, 1.0, num_keys) * (WEEK_MS - 1 - scale * span)

    key = visit_key[event_visit]
    ts = WEEK_START_MS + np.floor(shift[key] + scale[key] * (visit_start[event_visit] + offset))
    ts = ts.astype(np.int64)
    assert ts.min() >= WEEK_START_MS and ts.max() < WEEK_START_MS + WEEK_MS
    value = rng.integers(1, 101, n, dtype=np.int64)
    order = rng.permutation(n)
    return key[order].astype(np.int32), value, ts[order]


def generate_even_events(n: int, num_keys: int, seed: int):
    """n events spread evenly: each key and each millisecond of the week equally likely (key code
    int32, value int64, ts_ms int64, in random order), so every key has events in every hour."""
    import numpy as np

    rng = np.random.default_rng(seed)
    key = rng.integers(0, num_keys, n, dtype=np.int32)
    ts = WEEK_START_MS + rng.integers(0, WEEK_MS, n, dtype=np.int64)
    value = rng.integers(1, 101, n, dtype=np.int64)
    return key, value, ts


#: how the events are spread over the keys and the week: the generator of each
SPREADS = {"bursty": generate_events, "even": generate_even_events}


def key_names(num_keys: int) -> List[str]:
    return [f"key-{i:05d}" for i in range(num_keys)]


def dataset_dir(data_dir: str, universe: int, num_keys: int, seed: int, n: int,
                spread: str = "bursty") -> str:
    tag = f"universe-{universe}-keys-{num_keys}-seed-{seed}-gen{GENERATOR_VERSION}"
    if spread != "bursty":
        tag += f"-{spread}"
    return os.path.join(data_dir, tag, f"events-{n}")


def dataset_files(path: str) -> List[str]:
    return sorted(glob.glob(os.path.join(path, "part-*.parquet")))


def is_complete(path: str) -> bool:
    return os.path.exists(os.path.join(path, "_meta.json"))


def write_dataset(path: str, key, value, ts, names: List[str], meta: Dict[str, Any]) -> None:
    """Writes the rows in their order as FILES_PER_DATASET Parquet files, then _meta.json."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    if os.path.exists(path):
        shutil.rmtree(path)
    os.makedirs(path)
    names_arr = pa.array(names, pa.string())
    bounds = np.linspace(0, len(key), FILES_PER_DATASET + 1).astype(np.int64)
    for i, (lo, hi) in enumerate(zip(bounds[:-1], bounds[1:])):
        table = pa.table({
            "key": names_arr.take(pa.array(key[lo:hi])),
            "value": pa.array(value[lo:hi], pa.int64()),
            "ts_ms": pa.array(ts[lo:hi], pa.int64()),
        })
        pq.write_table(table, os.path.join(path, f"part-{i:05d}.parquet"), row_group_size=ROW_GROUP_ROWS)
    with open(os.path.join(path, "_meta.json"), "w") as fh:
        json.dump(dict(meta, rows=int(len(key))), fh, indent=1)


def release_arrow_memory() -> None:
    """Returns the memory Arrow's allocator keeps cached to the system (this process is long-lived)."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def read_dataset(path: str, limit: Optional[int] = None):
    """(key codes int32, key names, value int64, ts_ms int64) of a dataset's first `limit` rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.concat_tables([pq.read_table(f, read_dictionary=["key"]) for f in dataset_files(path)])
    if limit is not None:
        table = table.slice(0, limit)
    table = table.unify_dictionaries().combine_chunks()
    key = table.column("key").chunk(0)
    return (key.indices.to_numpy(zero_copy_only=False), key.dictionary.to_pylist(),
            table.column("value").to_numpy(), table.column("ts_ms").to_numpy())


def prepare_datasets(data_dir: str, universe: int, num_keys: int, seed: int,
                     sizes: List[int], log=print, spread: str = "bursty") -> Dict[int, str]:
    """Ensures a dataset of each size (a prefix of the universe) exists; returns {size: directory}.

    Reuses complete datasets from an earlier run with the same parameters; generates the universe
    only if it, or a prefix that cannot be cut from it, is missing.
    """
    sizes = sorted(set(sizes) | {universe})
    paths = {n: dataset_dir(data_dir, universe, num_keys, seed, n, spread) for n in sizes}
    missing = [n for n in sizes if not is_complete(paths[n])]
    if not missing:
        log(f"reusing the input in {os.path.dirname(paths[universe])}")
        return paths
    meta = {"universe": universe, "keys": num_keys, "seed": seed, "generator": GENERATOR_VERSION,
            "spread": spread}
    t0 = time.perf_counter()
    if is_complete(paths[universe]):
        key, names, value, ts = read_dataset(paths[universe])
    else:
        key, value, ts = SPREADS[spread](universe, num_keys, seed)
        names = key_names(num_keys)
    for n in missing:
        write_dataset(paths[n], key[:n], value[:n], ts[:n], names, meta)
    del key, value, ts
    release_arrow_memory()
    log(f"wrote {', '.join(f'{n:,}' for n in missing)}-event dataset(s) in "
        f"{time.perf_counter() - t0:.1f}s -> {os.path.dirname(paths[universe])} (not timed)")
    return paths


# ---- the reference answer -----------------------------------------------------------------------

def _checksum(names: List[str], key, start, total) -> Dict[str, int]:
    digest = 0
    for k, s, t in zip(key.tolist(), start.tolist(), total.tolist()):
        digest += window_digest(names[k], s, t)
    return {"windows": int(len(key)), "total": int(total.sum()), "digest": digest % DIGEST_MOD}


def reference_checksums(path: str) -> Dict[str, Any]:
    """The expected checksum of each pipeline on a dataset, with numpy; cached in _reference.json.

    fixed: window start = ts - ts % 1 hour. sessions: per key, in timestamp order, a new session
    starts when the gap to the previous event is >= 10 minutes (Beam's Sessions: windows
    [t, t + gap) merge when they overlap); a session's start is its first event's timestamp.
    """
    import numpy as np

    cache = os.path.join(path, "_reference.json")
    if os.path.exists(cache):
        with open(cache) as fh:
            cached = json.load(fh)
        if cached.get("version") == REFERENCE_VERSION:
            return cached
    key, names, value, ts = read_dataset(path)

    start = ts - ts % HOUR_MS
    group = key.astype(np.int64) * (WEEK_MS // HOUR_MS + 2) + (start - start.min()) // HOUR_MS
    _, first, inverse = np.unique(group, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=value).astype(np.int64)
    fixed = _checksum(names, key[first], start[first], sums)

    order = np.lexsort((ts, key))
    k, t, v = key[order], ts[order], value[order]
    same_key_gap = np.where(k[1:] == k[:-1], t[1:] - t[:-1], GAP_MS)
    new = np.ones(len(k), dtype=bool)
    new[1:] = same_key_gap >= GAP_MS
    starts = np.flatnonzero(new)
    sessions = _checksum(names, k[starts], t[starts], np.add.reduceat(v, starts))
    per_key = np.bincount(k[starts], minlength=len(names))

    ref = {"version": REFERENCE_VERSION, "fixed": fixed, "sessions": sessions,
           # consecutive events of a key exactly one gap apart: Spark's session_window merges them
           "pairs_exactly_gap_apart": int((same_key_gap[k[1:] == k[:-1]] == GAP_MS).sum()),
           "sessions_per_key": {"min": int(per_key.min()), "median": float(np.median(per_key)),
                                "mean": float(per_key.mean()), "max": int(per_key.max())},
           "events_per_session_median": float(np.median(np.diff(np.append(starts, len(k)))))}
    with open(cache, "w") as fh:
        json.dump(ref, fh, indent=1)
    del key, value, ts, order, k, t, v, same_key_gap
    release_arrow_memory()
    return ref


# ---- peak memory of a process tree --------------------------------------------------------------

class TreeMemorySampler(threading.Thread):
    """Samples the summed RSS of a process and all its descendants every `interval` seconds.

    The peak is the largest sum seen; `at_peak` splits it by process (driver Python, JVM, Python
    workers). Summed RSS counts pages shared between processes (e.g. forked Python workers and
    their daemon) once per process, so it is an upper bound of the memory really used.

    Also estimates how much of the machine's CPU time during the run went to other processes
    (`others_cpu_share`, 0..1): the system's busy CPU time minus the tree's, over wall time x CPUs.
    """

    def __init__(self, pid: int, interval: float = 0.05) -> None:
        import psutil

        super().__init__(daemon=True)
        self.pid = pid
        self.interval = interval
        self.peak = 0
        self.at_peak: Dict[str, int] = {}
        self.max_processes = 0
        self.samples = 0
        self.seen: Dict[int, Any] = {}        # every process of the tree seen, by pid
        self.cpu_seconds: Dict[int, float] = {}  # each one's last seen user + system CPU time
        self._stop_event = threading.Event()
        self._t0 = time.perf_counter()
        self._busy0 = _busy_cpu_seconds(psutil.cpu_times())
        self.others_cpu_share: Optional[float] = None
        self.full_every = 10   # samples between reads of every thread of the tree (see _tree_pids)
        self._forking: Dict[int, List[str]] = {}

    def _sample(self, root) -> Tuple[int, Dict[str, int]]:
        """(summed RSS, RSS by kind) of the tree now: driver, JVM, Python workers."""
        parts: Dict[str, int] = {}
        listed, stats = self._tree_stats(root)
        for pid, name, cpu, rss in stats:
            self.cpu_seconds[pid] = cpu
            kind = "driver" if pid == root.pid else ("jvm" if "java" in name else "workers")
            parts[kind] = parts.get(kind, 0) + rss
        self.max_processes = max(self.max_processes, listed)
        return sum(parts.values()), parts

    def _tree_stats(self, root) -> Tuple[int, List[Tuple[int, str, float, int]]]:
        """(processes listed, (pid, name, CPU seconds, RSS bytes) of those still there) of the
        tree, each new one added to `seen`. Read from `/proc` directly where it can: the tree's
        processes from their threads' `children` files, each one's figures from its `stat` file
        (psutil's recursive `children` reads every process's `stat` on the machine at each
        call, which took about a fifth of a core at 20 samples a second, taken from the
        contenders on a two-core machine); through psutil elsewhere."""
        out: List[Tuple[int, str, float, int]] = []
        if self.samples % self.full_every == 0:   # every thread read again: new forking threads
            self._forking = {}
        pids = _tree_pids(root.pid, self._forking)
        if pids is not None:
            for pid in pids:
                stat = _proc_stat(pid)
                if stat is None:
                    continue
                if pid not in self.seen:
                    self.seen[pid] = _process(pid)
                out.append((pid, *stat))
            return len(pids), out
        import psutil

        procs = [root]
        try:
            procs += root.children(recursive=True)
        except psutil.Error:
            pass
        for p in procs:
            self.seen.setdefault(p.pid, p)
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    name = p.name()
                    cpu = p.cpu_times()
            except psutil.Error:
                continue
            out.append((p.pid, name, cpu.user + cpu.system, rss))
        return len(procs), out

    def run(self) -> None:
        import psutil

        try:
            root = psutil.Process(self.pid)
        except psutil.Error:
            return
        while root.is_running():
            total, parts = self._sample(root)
            self.samples += 1
            if total > self.peak:
                self.peak, self.at_peak = total, parts
            if self._stop_event.wait(self.interval):
                return

    def stop(self) -> None:
        import psutil

        self._stop_event.set()
        self.join()
        wall = time.perf_counter() - self._t0
        busy = _busy_cpu_seconds(psutil.cpu_times()) - self._busy0
        others = max(0.0, busy - sum(self.cpu_seconds.values()))
        self.others_cpu_share = others / (wall * (psutil.cpu_count() or 1)) if wall > 0 else None

    def reap(self, timeout: float = 30.0) -> None:
        """Waits until every process of the tree has exited (a JVM can outlive its driver for a
        moment), so that the next run starts alone; kills what is left after `timeout`."""
        import psutil

        _, alive = psutil.wait_procs([p for p in self.seen.values() if p is not None],
                                     timeout=timeout)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _tree_pids(root: int, forking: Optional[Dict[int, List[str]]] = None) -> Optional[List[int]]:
    """`root` and its descendants, from `/proc/PID/task/TID/children` (every thread's children:
    a JVM forks from its threads); None where the kernel has no such files. With `forking`
    (pid -> the threads that had children, and the main thread), a process it holds has only
    those threads read; any other has every thread read and is added to it. (A JVM of 70-150
    threads costs 1-2.5 ms to read in full, 20 times a second, on the contenders' CPUs.)"""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        known = None if forking is None else forking.get(pid)
        if known is not None:
            tids = known
        else:
            try:
                tids = os.listdir(f"/proc/{pid}/task")
            except OSError:
                continue
        parents = [str(pid)]
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as fh:
                    children = fh.read().split()
            except OSError:
                continue
            if children:
                todo.extend(int(c) for c in children)
                parents.append(tid)
        if forking is not None and known is None:
            forking[pid] = sorted(set(parents))
    return out


def _proc_stat(pid: int) -> Optional[Tuple[str, float, int]]:
    """(name, user + system CPU seconds, RSS bytes) of a process, from `/proc/PID/stat`."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    head, _, rest = data.rpartition(b")")
    fields = rest.split()
    # after the name: state is field 3, utime 14, stime 15 and rss 24 (proc(5))
    return (head.partition(b"(")[2].decode(errors="replace"),
            (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE)


def _process(pid: int) -> Any:
    """psutil's Process of `pid` (for `reap`), or None if it has already gone."""
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _busy_cpu_seconds(t) -> float:
    return t.user + t.nice + t.system + getattr(t, "irq", 0.0) + getattr(t, "softirq", 0.0) + \
        getattr(t, "steal", 0.0)


def add_run_flags(ap: Any) -> None:
    """The flags every benchmark command that runs contenders in subprocesses takes: --timeout,
    --wait-idle and --json."""
    ap.add_argument("--timeout", type=float, default=3600, help="seconds before a run is killed")
    ap.add_argument("--wait-idle", type=float, default=0, metavar="SECONDS",
                    help="before each run, wait up to this long for the CPUs to be 90%% idle (on a shared "
                         "machine)")
    ap.add_argument("--json", default=None, metavar="PATH", help="write all results to this file")


def finish(json_path: Optional[str], results: Dict[str, Any], problems: List[str]) -> int:
    """Ends a benchmark command: writes `results` (plus the exit status) to `json_path` when given,
    prints the problems found, and returns the exit status (1 if there were problems)."""
    status = 1 if problems else 0
    if json_path:
        with open(json_path, "w") as fh:
            json.dump({**results, "exit_status": status}, fh, indent=1, default=str)
        print(f"\nresults written to {json_path}")
    if problems:
        print("\n" + "\n\n".join(problems), file=sys.stderr)
        print(f"\nFAILED: {len(problems)} problem(s) above", file=sys.stderr)
    return status


def wait_until_idle(max_wait: float, idle_share: float = 0.9) -> float:
    """Waits (at most `max_wait` seconds) until the CPUs are at least `idle_share` idle over 2 s;
    returns the last busy share measured."""
    import psutil

    deadline = time.monotonic() + max_wait
    busy = psutil.cpu_percent(interval=2.0) / 100.0
    if busy > 1 - idle_share and max_wait > 0:
        print(f"(waiting for other work to finish: CPUs {busy:.0%} busy) ...", end=" ", flush=True)
        while busy > 1 - idle_share and time.monotonic() < deadline:
            busy = psutil.cpu_percent(interval=2.0) / 100.0
    return busy


def kill_tree(pid: int) -> None:
    """Kills a process we started and all its descendants (e.g. after a timeout)."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = root.children(recursive=True) + [root]
    except psutil.Error:
        return
    for p in procs:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=10)
