"""Where a micro-batch of headrace's own streaming query goes: Spark's phases, jobs and stages.

    ./dev bench streaming_breakdown [--shape connector|teststream|both] [--seconds 40]
                                    [--rate 200] [--steps 40] [--master local[2]]

Runs a headrace pipeline on the streaming SparkRunner with Spark's event log on, then reads
the log and the query's progress reports and prints, averaged over the micro-batches after
the first three:

* the phases of a micro-batch as Spark times them (`durationMs`: latestOffset, the planning of
  the batch by headrace's source and coordinator; queryPlanning; addBatch, the jobs; walCommit
  and commitOffsets, the offset and commit logs) and what triggerExecution has beyond them;
* within addBatch, the Spark jobs per batch, their time, and the time between them (the
  driver's work between jobs: planning each job, the foreachBatch callback, the sink's results);
* each kind of stage (by its RDD scope: the source scan, each `mapInArrow` level, each
  `transformWithState` operator, the sink's collect): its wall time per batch, tasks, the
  tasks' summed run time, deserialization and result serialization, and the state store's
  own timings (load, commit) where the stage has a stateful operator.

Shapes:

* `connector`: the connectors' shape with no server, three stateful operators: a splittable
  read (`PeriodicSequence`, `--rate` events per second of wall time), `FixedWindows(2 s)` with
  early panes every `AfterCount(5)`, `CombinePerKey(sum)` over 50 keys, and an exactly-once
  sink (`WriteInFlushes` with a writer that appends each flush to a file with its marker).
* `teststream`: the test suite's shape, one stateful operator: a TestStream of `--steps`
  element events (10 elements each) and watermark advances, `FixedWindows(10 s)`,
  `CombinePerKey(sum)`, a Map.

This finds what the issue "a cheaper micro-batch" asks for; `streaming_floor.py` gives the floor
of an empty query and of a no-op stateful operator for comparison.
"""

from __future__ import annotations

import argparse
import collections
import glob
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from headrace.io.flushes import FlushWriter  # noqa: E402  (the repository's, from its root)

PHASES = ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")
SKIP = 3   # the first batches (start-up, the first job of each kind) are left out


class FileFlushes(FlushWriter):
    """A FlushWriter appending each flush to a file of its shard, marked by its number (exactly
    once: a marker already there writes nothing)."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def write(self, shard: int, flush: int, elements: List[Any]) -> bool:
        marker = os.path.join(self.directory, f"marker-{shard}-{flush}")
        if os.path.exists(marker):
            return False
        with open(os.path.join(self.directory, f"shard-{shard}"), "a") as fh:
            fh.writelines(f"{e!r}\n" for e in elements)
        open(marker, "w").close()
        return True


def build(shape: str, p: Any, args: argparse.Namespace, out_dir: str) -> None:
    """The pipeline of `shape` (see the module doc) on `p`."""
    import headrace as beam
    from headrace.transforms import trigger as tr
    from headrace.transforms.window import FixedWindows, TimestampedValue
    from headrace.utils.timestamp import Timestamp
    if shape == "connector":
        from headrace.io.flushes import WriteInFlushes
        from headrace.io.periodicsequence import PeriodicSequence
        now = time.time()
        spec = (Timestamp.of(now), Timestamp.of(now + args.seconds), 1.0 / args.rate)
        _ = (p | "Spec" >> beam.Create([spec])
             | "Read" >> PeriodicSequence()
             | "Event" >> beam.Map(lambda t: TimestampedValue(
                 (f"k{int(float(t) * args.rate) % 50}", 1), t))
             | "Window" >> beam.WindowInto(
                 FixedWindows(2), trigger=tr.AfterWatermark(early=tr.AfterCount(5)),
                 accumulation_mode=tr.AccumulationMode.ACCUMULATING)
             | "Sum" >> beam.CombinePerKey(sum)
             | "Sink" >> WriteInFlushes(FileFlushes(out_dir), num_shards=4))
    else:
        from headrace.testing.test_stream import TestStream
        ts = TestStream()
        for step in range(args.steps):
            ts = ts.add_elements([TimestampedValue((f"k{i % 5}", i), step + i / 10)
                                  for i in range(10)])
            ts = ts.advance_watermark_to(step + 1)
        ts = ts.advance_watermark_to_infinity()
        _ = (p | "Stream" >> ts
             | "Window" >> beam.WindowInto(FixedWindows(10))
             | "Sum" >> beam.CombinePerKey(sum)
             | "Format" >> beam.Map(str))


def run(shape: str, args: argparse.Namespace, work: str) -> Tuple[List[Dict[str, Any]], str]:
    """Runs `shape` on the streaming SparkRunner; its progress reports and its event log file."""
    import headrace as beam
    from headrace.options.pipeline_options import PipelineOptions
    logs = os.path.join(work, f"eventlog-{shape}")
    out = os.path.join(work, f"out-{shape}")
    os.makedirs(logs)
    os.makedirs(out)
    options = PipelineOptions([
        "--runner=SparkRunner", "--streaming", f"--spark_master={args.master}",
        f"--checkpoint_location={os.path.join(work, 'ckpt-' + shape)}",
        "--spark_conf=spark.ui.enabled=false",
        "--spark_conf=spark.sql.streaming.numRecentProgressUpdates=100000",
        "--spark_conf=spark.eventLog.enabled=true", f"--spark_conf=spark.eventLog.dir={logs}",
        "--spark_conf=spark.eventLog.compress=false"])
    p = beam.Pipeline(options=options)
    build(shape, p, args, out)
    result = p.run()
    result.wait_until_finish()
    progress = [json.loads(q.json) if hasattr(q, "json") else dict(q)
                for q in getattr(result, "query").recentProgress]
    from headrace.runners.spark import session as sessions
    sessions.stop_session()   # flushes and closes the event log
    files = sorted(glob.glob(os.path.join(logs, "*")))
    if len(files) != 1:
        raise SystemExit(f"streaming_breakdown: expected one event log in {logs}, found {files}")
    return progress, files[0]


def _scope(stage: Dict[str, Any]) -> str:
    """A stage's kind: the Spark SQL operators in its RDDs' scopes, in a fixed order (e.g.
    'Exchange + MapInArrow + TransformWithStateInPySpark')."""
    names = set()
    for rdd in stage.get("RDD Info", []):
        scope = rdd.get("Scope")
        if scope:
            names.add(json.loads(scope).get("name", "").split(" (")[0])
    names -= {"", "WholeStageCodegen", "mapPartitionsInternal", "DeserializeToObject",
              "SerializeFromObject"}
    return " + ".join(sorted(names)) or stage.get("Stage Name", "?").split(" at ")[0]


def read_log(path: str) -> Dict[int, Dict[str, Any]]:
    """Per batch id: its jobs (start, end) and its stages' figures, from a Spark event log."""
    batches: Dict[int, Dict[str, Any]] = collections.defaultdict(
        lambda: {"jobs": {}, "stages": []})
    job_batch: Dict[int, int] = {}
    stage_batch: Dict[int, int] = {}
    tasks: Dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    # Spark 4 writes a rolling log: a directory of numbered event files (events_N_appid)
    paths = (sorted(glob.glob(os.path.join(path, "events_*")),
                    key=lambda f: int(os.path.basename(f).split("_")[1]))
             if os.path.isdir(path) else [path])
    for f in paths:
        with open(f) as fh:
            events = [json.loads(line) for line in fh]
        for ev in events:
            kind = ev.get("Event")
            if kind == "SparkListenerJobStart":
                batch = (ev.get("Properties") or {}).get("streaming.sql.batchId")
                if batch is None:
                    continue
                job_batch[ev["Job ID"]] = int(batch)
                batches[int(batch)]["jobs"][ev["Job ID"]] = [ev["Submission Time"], None]
                for s in ev.get("Stage IDs", []):
                    stage_batch[s] = int(batch)
            elif kind == "SparkListenerJobEnd" and ev["Job ID"] in job_batch:
                batches[job_batch[ev["Job ID"]]]["jobs"][ev["Job ID"]][1] = ev["Completion Time"]
            elif kind == "SparkListenerTaskEnd" and ev.get("Stage ID") in stage_batch:
                m = ev.get("Task Metrics") or {}
                t = tasks[ev["Stage ID"]]
                t["tasks"] += 1
                for key in ("Executor Run Time", "Executor Deserialize Time",
                            "Result Serialization Time", "JVM GC Time"):
                    t[key] += m.get(key, 0)
            elif kind == "SparkListenerStageCompleted":
                info = ev["Stage Info"]
                sid = info["Stage ID"]
                if sid not in stage_batch or "Submission Time" not in info:
                    continue
                acc = {a.get("Name"): a.get("Value") for a in info.get("Accumulables", [])}
                batches[stage_batch[sid]]["stages"].append({
                    "scope": _scope(info), "ms": info["Completion Time"] - info["Submission Time"],
                    "skipped": False, "tasks": dict(tasks.get(sid, {})), "acc": acc})
    return batches


def _union_ms(intervals: List[List[Optional[int]]]) -> int:
    spans = sorted((a, b) for a, b in intervals if a is not None and b is not None)
    total, end = 0, None
    for a, b in spans:
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


STATE_METRICS = ("time to load", "time to commit changes", "time to remove",
                 "time spent on user code", "number of total state rows")


def report(shape: str, progress: List[Dict[str, Any]], batches: Dict[int, Dict[str, Any]]) -> None:
    """Prints the breakdown of `shape`'s micro-batches (see the module doc)."""
    progress = sorted(progress, key=lambda q: q["batchId"])[SKIP:]
    if not progress:
        print(f"\n{shape}: fewer than {SKIP + 1} micro-batches; nothing to report")
        return
    n = len(progress)
    mean = lambda xs: sum(xs) / n   # noqa: E731  (per batch, over the reported ones)
    print(f"\n{shape}: {n} micro-batches (ids {progress[0]['batchId']}-{progress[-1]['batchId']}), "
          f"{sum(q.get('numInputRows', 0) for q in progress)} input rows")
    total = [q["durationMs"].get("triggerExecution", 0) for q in progress]
    print(f"  triggerExecution   mean {mean(total):7.0f} ms   p50 {statistics.median(total):7.0f} ms")
    parts = 0.0
    for ph in PHASES:
        v = mean([q["durationMs"].get(ph, 0) for q in progress])
        parts += v
        print(f"    {ph:<16} {v:7.0f} ms")
    print(f"    {'(the rest)':<16} {mean(total) - parts:7.0f} ms")
    ids = [q["batchId"] for q in progress]
    add = mean([q["durationMs"].get("addBatch", 0) for q in progress])
    jobs = [batches[b]["jobs"] for b in ids if b in batches]
    in_jobs = mean([_union_ms(list(j.values())) for j in jobs])
    print(f"  addBatch: {mean([len(j) for j in jobs]):.1f} Spark jobs per batch, {in_jobs:.0f} ms "
          f"in jobs, {add - in_jobs:.0f} ms between and around them")
    kinds: Dict[str, List[Dict[str, Any]]] = collections.defaultdict(list)
    for b in ids:
        for st in batches.get(b, {}).get("stages", []):
            kinds[st["scope"]].append(st)
    print(f"  {'stage (operators in its scope)':<58} {'ms/batch':>8} {'tasks':>6} "
          f"{'run ms':>7} {'deser':>6} {'ser':>5}  state store (ms per batch)")
    for scope, sts in sorted(kinds.items(), key=lambda kv: -sum(s["ms"] for s in kv[1])):
        t: collections.Counter = collections.Counter()
        for s in sts:
            t.update(s["tasks"])
        state = []
        for name in STATE_METRICS[:-1]:
            vals = [float(s["acc"][name]) for s in sts if s["acc"].get(name) not in (None, "")]
            if vals:
                state.append(f"{name.replace('time to ', '').replace('time spent on ', '')} "
                             f"{sum(vals) / n:.0f}")
        print(f"  {scope[:58]:<58} {sum(s['ms'] for s in sts) / n:8.0f} {t['tasks'] / n:6.1f} "
              f"{t['Executor Run Time'] / n:7.0f} {t['Executor Deserialize Time'] / n:6.0f} "
              f"{t['Result Serialization Time'] / n:5.0f}  {', '.join(state)}")


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", choices=("connector", "teststream", "both"), default="both")
    ap.add_argument("--seconds", type=float, default=40.0,
                    help="connector: how long the read's sequence lasts (wall time)")
    ap.add_argument("--rate", type=float, default=200.0, help="connector: events per second")
    ap.add_argument("--steps", type=int, default=40, help="teststream: element events")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--keep", action="store_true", help="keep the event logs and checkpoints")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    work = tempfile.mkdtemp(prefix="headrace-breakdown-")
    try:
        for shape in (("connector", "teststream") if args.shape == "both" else (args.shape,)):
            t0 = time.monotonic()
            progress, log = run(shape, args, work)
            print(f"{shape}: ran in {time.monotonic() - t0:.1f} s (with the session's start)")
            report(shape, progress, read_log(log))
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
