"""The windowed-sum pipeline shared by both benchmark workers.

`build_and_run(beam, options, events, kind)` takes the SDK module as a parameter, so
`_beam_worker.py` passes `apache_beam` and `_headrace_worker.py` passes `headrace`: the
pipeline code the two contenders execute is the same source text.

Also holds the input-file helpers and a plain-Python reference computation of the expected
checksum; these use only the standard library (both virtualenvs import this module).
"""

from __future__ import annotations

import pickle
import random
import zlib
from typing import Dict, List, Tuple

FIXED_SIZE_S = 3600   # FixedWindows(3600): one hour
SESSION_GAP_S = 600   # Sessions(600): ten-minute gap
WEEK_MS = 7 * 24 * 3600 * 1000
BASE_S = 1_700_000_000  # 2023-11-14T22:13:20Z, the start of the week of event time

PIPELINES = ("fixed", "sessions")
PIPELINE_LABELS = {"fixed": "FixedWindows(3600)", "sessions": "Sessions(600)"}

Event = Tuple[str, int, float]


# ---- input -------------------------------------------------------------------------------

def generate_events(n: int, num_keys: int, seed: int) -> List[Event]:
    """n (key, value, timestamp_seconds) tuples; timestamps uniform over one week, ms resolution."""
    rng = random.Random(seed)
    keys = [f"key-{i:05d}" for i in range(num_keys)]
    randrange = rng.randrange
    return [(keys[randrange(num_keys)], randrange(1, 101), BASE_S + randrange(WEEK_MS) / 1000.0)
            for _ in range(n)]


def save_events(events: List[Event], path: str) -> None:
    with open(path, "wb") as fh:
        pickle.dump(events, fh, protocol=4)


def load_events(path: str) -> List[Event]:
    with open(path, "rb") as fh:
        return pickle.load(fh)


# ---- checksum ----------------------------------------------------------------------------

def window_digest(key: str, start_us: int, end_us: int, total: int) -> int:
    """A per-output fingerprint; the run's digest is the sum of these over all outputs."""
    return zlib.crc32(f"{key}|{start_us}|{end_us}|{total}".encode("utf-8"))


def _micros(ts: float) -> int:
    return int(round(ts * 1_000_000))


def reference_checksum(events: List[Event], kind: str) -> Dict[str, int]:
    """The expected {windows, total, digest}, computed without any pipeline SDK."""
    sums: Dict[Tuple[str, int, int], int] = {}
    if kind == "fixed":
        size = FIXED_SIZE_S * 1_000_000
        for k, v, ts in events:
            us = _micros(ts)
            start = us - us % size
            wk = (k, start, start + size)
            sums[wk] = sums.get(wk, 0) + v
    elif kind == "sessions":
        gap = SESSION_GAP_S * 1_000_000
        per_key: Dict[str, List[Tuple[int, int]]] = {}
        for k, v, ts in events:
            per_key.setdefault(k, []).append((_micros(ts), v))
        for k, lst in per_key.items():
            lst.sort()
            start, end, acc = lst[0][0], lst[0][0] + gap, 0
            for us, v in lst:
                if us >= end:  # [us, us+gap) does not overlap the open session: close it
                    sums[(k, start, end)] = acc
                    start, end, acc = us, us + gap, 0
                end = max(end, us + gap)
                acc += v
            sums[(k, start, end)] = acc
    else:
        raise ValueError(kind)
    digest = 0
    for (k, s, e), total in sums.items():
        digest += window_digest(k, s, e, total)
    return {"windows": len(sums), "total": sum(sums.values()), "digest": digest}


# ---- the pipeline ------------------------------------------------------------------------

def build_and_run(beam, options, events: List[Event], kind: str) -> Dict[str, int]:
    """Create -> TimestampedValue -> WindowInto -> CombinePerKey(sum) -> checksum step; runs it."""
    window = beam.window
    Metrics = beam.metrics.Metrics
    MetricsFilter = beam.metrics.MetricsFilter

    class Checksum(beam.DoFn):
        """Counts outputs, sums them and fingerprints (key, window, sum); reports via Metrics."""

        def __init__(self):
            self.outputs = Metrics.counter("windowed_sum", "windows")
            self.total = Metrics.counter("windowed_sum", "total")
            self.digest = Metrics.counter("windowed_sum", "digest")

        def start_bundle(self):
            self.n = self.t = self.d = 0

        def process(self, kv, w=beam.DoFn.WindowParam):
            key, total = kv
            self.n += 1
            self.t += total
            self.d += window_digest(key, w.start.micros, w.end.micros, total)

        def finish_bundle(self):
            if self.n:
                self.outputs.inc(self.n)
                self.total.inc(self.t)
                self.digest.inc(self.d)

    windowfn = (window.FixedWindows(FIXED_SIZE_S) if kind == "fixed"
                else window.Sessions(SESSION_GAP_S))
    p = beam.Pipeline(options=options)
    _ = (p
         | "Create" >> beam.Create(events)
         | "Timestamp" >> beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2]))
         | "Window" >> beam.WindowInto(windowfn)
         | "SumPerKey" >> beam.CombinePerKey(sum)
         | "Checksum" >> beam.ParDo(Checksum()))
    result = p.run()
    result.wait_until_finish()
    got = {"windows": 0, "total": 0, "digest": 0}
    for c in result.metrics().query(MetricsFilter().with_namespace("windowed_sum"))["counters"]:
        got[c.key.metric.name] += c.committed
    return got


# ---- the worker process ------------------------------------------------------------------

def worker_main(contender: str, beam, make_options, argv=None) -> None:
    """Loads the input, times pipeline construction + run, prints one JSON line on stdout.

    The SDK is imported by the caller before this runs, so import time is not counted; nor is
    loading the input file. Peak RSS is the whole worker process's ru_maxrss (input included).
    """
    import argparse
    import json
    import resource
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True, help="pickle of (key, value, ts) tuples")
    ap.add_argument("--pipeline", required=True, choices=PIPELINES)
    ap.add_argument("--profile", default=None,
                    help="write cProfile stats of construction+run to this file")
    args = ap.parse_args(argv)

    events = load_events(args.input)
    rss_input_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    options = make_options()
    profiler = None
    if args.profile:
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
    t0 = time.perf_counter()
    got = build_and_run(beam, options, events, args.pipeline)
    seconds = time.perf_counter() - t0
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    hwm_mb = None
    try:  # the same peak as the kernel's per-address-space counter, as a cross-check
        with open("/proc/self/status") as fh:
            for ln in fh:
                if ln.startswith("VmHWM:"):
                    hwm_mb = int(ln.split()[1]) / 1024.0
    except OSError:
        pass
    print(json.dumps({
        "contender": contender,
        "pipeline": args.pipeline,
        "events": len(events),
        "seconds": seconds,
        "events_per_s": len(events) / seconds if seconds > 0 else None,
        "peak_rss_mb": peak_mb,
        "rss_after_input_mb": rss_input_mb,
        "vm_hwm_mb": hwm_mb,
        "checksum": got,
    }), flush=True)


# ---- input preparation (run as a subprocess of windowed_sum.py) ---------------------------

def prepare_main(argv=None) -> None:
    """Writes events-<n>.pkl for each size and prints the reference checksums as JSON.

    windowed_sum.py runs this in a child process so that its own memory stays small: on Linux
    a child's ru_maxrss starts from its parent's peak RSS at fork/exec time, so a parent that
    held the events would inflate every worker's reported peak.
    """
    import argparse
    import json
    import os
    import time

    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--events", type=int, required=True)
    ap.add_argument("--keys", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--sizes", required=True, help="comma-separated event counts (prefixes)")
    ap.add_argument("--pipelines", required=True)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    events = generate_events(args.events, args.keys, args.seed)
    out = {"files": {}, "expected": {}}
    for n in sorted({int(x) for x in args.sizes.split(",")}):
        path = os.path.join(args.dir, f"events-{n}.pkl")
        save_events(events[:n], path)
        out["files"][str(n)] = path
        for p in args.pipelines.split(","):
            out["expected"][f"{p}/{n}"] = reference_checksum(events[:n], p)
    out["seconds"] = time.perf_counter() - t0
    print(json.dumps(out))


if __name__ == "__main__":
    prepare_main()
