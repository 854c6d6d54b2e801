"""The general path (user Python functions): headrace's SparkRunner vs a hand-written PySpark RDD job.

    python benchmarks/general_path.py [--events 1000000] [--beam-events 50000] [--master local[2]]
        [--repeat 3] [--only headrace-spark,rdd,headrace-local,beam,headrace-connect] [--skip-beam]
        [--warmup 0] [--runner-starts-spark] [--wait-idle SECONDS] [--json PATH]

The job (benchmarks/_general_path_job.py, written once as plain Python functions that every
contender calls) is shaped like the sessions & billing demo: parse JSON log lines, malformed ones
to a dead letter; per-user Sessions(30 min) summarised by a custom CombineFn; per-user totals with
a GroupByKey in the global window; the top 5 users with combiners.Top; hourly revenue per
advertiser with FixedWindows(1 h) + CombinePerKey(sum), then over all advertisers; every result
written as JSON lines. Input: the demo's generator (headrace.examples.sessions_billing.data), 4
files, cached in --data-dir. Contenders:

  headrace-spark  the pipeline on headrace's SparkRunner (a SparkSession with the RDD job's settings
                  is started first, outside the timing, and the runner picks it up)
  rdd             the same functions in a hand-written PySpark RDD job: textFile, mapPartitions
                  (try/except dead letter), groupByKey + sort for sessions, reduceByKey, top,
                  saveAsTextFile; the parsed lines, sessions, user totals and revenue are cached
  headrace-local  the pipeline on headrace's LocalRunner
  headrace-connect  (only with --only) the pipeline on headrace's SparkRunner over Spark Connect
                  (a Spark Connect server started in the worker's process on --master)
  beam            the pipeline on Apache Beam's Python DirectRunner, in Beam's own virtualenv, on a
                  smaller input (--beam-events); compared with headrace-local on that same input

With --runner-starts-spark, headrace-spark and headrace-connect start no session first: the
SparkRunner starts Spark (or its Spark Connect server) with the same settings and headrace's own
(its JVM class archive and options, its Python worker daemon), inside the timed part.

Each run is its own subprocess (_general_path_worker.py); this process samples the RSS of its whole
process tree (driver Python, JVM, Python workers) every 50 ms. --repeat runs per contender, the
contenders' order alternating (forwards, backwards, ...); the table shows the median time and the
largest peak. Every output of every run is read back, normalised (JSON records re-serialised with
sorted keys, sorted) and compared with the RDD job's (or, on Beam's input, headrace-local's).
Exit status 1 if a contender crashed or an output differs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import default_beam_python  # noqa: E402
from _general_path_job import OUTPUTS, normalised  # noqa: E402
from _general_path_worker import CONTENDERS, OPTIONAL  # noqa: E402
from _spark_bench_common import add_run_flags, finish, wait_until_idle  # noqa: E402
from spark_windowed_sum import (  # noqa: E402
    BUSY_SHARE, check_beam, fmt_table, machine_description, run_worker, worker_env, x,
)

WORKER = os.path.join(HERE, "_general_path_worker.py")
LABELS = {"headrace-spark": "headrace SparkRunner", "rdd": "PySpark RDD job (by hand)",
          "headrace-connect": "headrace, Spark Connect",
          "headrace-local": "headrace LocalRunner", "beam": "Beam DirectRunner"}
SPARK_CONTENDERS = ("headrace-spark", "rdd", "headrace-connect")


# ---- the input ----------------------------------------------------------------------------------

def prepare_input(data_dir: str, n: int, users: int, seed: int, chunk: int = 0) -> str:
    """The demo's generated log of n events (plus its malformed lines), reused if complete;
    returns the glob of its files. With `chunk`, n events as independent logs of `chunk` events
    each (`_write_chunk`), written by one process per CPU: an input too large to build in memory
    (the generator sorts a whole day's events), e.g. 100 M events."""
    from headrace.examples.sessions_billing.data import MALFORMED_LINES, generate_events

    d = os.path.join(data_dir, f"events-{n}-users-{users}-seed-{seed}"
                     + (f"-chunks-of-{chunk}" if chunk else ""))
    done = os.path.join(d, "_done.json")
    if not os.path.exists(done):
        t0 = time.perf_counter()
        if chunk:
            import multiprocessing

            os.makedirs(d, exist_ok=True)
            jobs = [(d, k, min(chunk, n - k * chunk), users, seed) for k in range(-(-n // chunk))]
            with multiprocessing.Pool(os.cpu_count() or 1) as pool:
                paths = pool.starmap(_write_chunk, jobs)
            info = {"events": n, "malformed": len(jobs) * len(MALFORMED_LINES), "files": paths}
        else:
            gen = generate_events(d, n, users, seed)
            info = {"events": gen.events, "malformed": gen.malformed, "files": gen.paths}
        with open(done, "w") as fh:
            json.dump(info, fh)
        print(f"generated {n:,} events in {time.perf_counter() - t0:.1f}s -> {d} (not timed)")
    else:
        print(f"reusing the {n:,}-event input in {d}")
    return os.path.join(d, "events-*.jsonl")


def _write_chunk(d: str, k: int, n: int, users: int, seed: int) -> str:
    """Chunk k of a chunked input: the generator's day of n events with seed + k (so the users'
    visits of different chunks interleave in time, as in one larger log), one file."""
    from headrace.examples.sessions_billing.data import generate_lines

    path = os.path.join(d, f"events-{k:05d}.jsonl")
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        for line in generate_lines(n, users, seed + k):
            fh.write(line)
            fh.write("\n")
    os.replace(path + ".tmp", path)
    return path


# ---- the outputs --------------------------------------------------------------------------------

def fingerprint(outputs: Dict[str, List[str]]) -> Dict[str, Any]:
    return {name: {"records": len(lines),
                   "sha256": hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]}
            for name, lines in outputs.items()}


def differences(got: Dict[str, List[str]], ref: Dict[str, List[str]]) -> Dict[str, Any]:
    """Per output that differs: records in each count, and a few records only in one of them."""
    out = {}
    for name in OUTPUTS:
        if got[name] != ref[name]:
            a, b = set(got[name]), set(ref[name])
            out[name] = {"records": len(got[name]), "reference_records": len(ref[name]),
                         "only_here": sorted(a - b)[:3], "only_in_reference": sorted(b - a)[:3]}
    return out


# ---- running ------------------------------------------------------------------------------------

def worker_cmd(args: argparse.Namespace, contender: str, pattern: str, out: str) -> List[str]:
    python = args.beam_python if contender == "beam" else sys.executable
    return [python, WORKER, "--contender", contender, "--input", pattern, "--output", out,
            "--master", args.master, "--shuffle-partitions", str(args.shuffle_partitions),
            "--driver-memory", args.driver_memory, "--warmup",
            str(args.warmup if contender in SPARK_CONTENDERS else 0)] + (
                ["--runner-starts-spark"] if args.runner_starts_spark
                and contender in ("headrace-spark", "headrace-connect") else [])


def run_group(args: argparse.Namespace, contenders: List[str], n: int, pattern: str,
              reference: str) -> Dict[str, Dict[str, Any]]:
    """--repeat rounds over `contenders` on one input, the order alternating; each run's outputs
    are compared with those of `reference` (the first of its runs that succeeded)."""
    recs: Dict[str, Dict[str, Any]] = {c: {"contender": c, "events": n, "runs": []} for c in contenders}
    ref_out: Optional[Dict[str, List[str]]] = None
    pending: List[tuple] = []  # (rec, run, outputs) seen before the reference's outputs exist
    order_of = [reference] + [c for c in contenders if c != reference]
    for i in range(args.repeat):
        order = order_of if i % 2 == 0 else list(reversed(order_of))
        for c in order:
            rec = recs[c]
            if "error" in rec:
                continue
            print(f"  {LABELS[c]:26s} {n:>11,} events (run {i + 1}/{args.repeat}) ...", end=" ", flush=True)
            if args.wait_idle:
                wait_until_idle(args.wait_idle)
            out = tempfile.mkdtemp(prefix=f"general-path-{c}-", dir=args.data_dir)
            os.rmdir(out)  # the contenders create it (saveAsTextFile wants it absent)
            r = run_worker(worker_cmd(args, c, pattern, out), worker_env(c != "beam"), args.timeout)
            rec["runs"].append(r)
            if "error" in r:
                print(f"ERROR: {r['error']}")
                rec["error"], rec["stderr_tail"] = r["error"], r["stderr_tail"]
                shutil.rmtree(out, ignore_errors=True)
                continue
            outputs = normalised(out)
            shutil.rmtree(out, ignore_errors=True)
            r["outputs"] = fingerprint(outputs)
            if c == reference and ref_out is None:
                ref_out = outputs
            if ref_out is None:
                pending.append((r, outputs))
                agree = "(compared later)"
            else:
                r["differences"] = differences(outputs, ref_out)
                agree = "outputs agree" if not r["differences"] else \
                    f"OUTPUTS DIFFER: {', '.join(r['differences'])}"
            print(f"{r['seconds']:.2f}s, {n / r['seconds']:,.0f} events/s, {r['cpu_s']:.1f} CPU s, "
                  f"peak {r['peak_mib']:,.0f} MiB, "
                  f"{agree}; other processes used {r['others_cpu_share']:.0%} of the CPUs")
    for r, outputs in pending:
        r["differences"] = differences(outputs, ref_out) if ref_out is not None else None
    for c, rec in recs.items():
        ok = [r for r in rec["runs"] if "error" not in r]
        if not ok or "error" in rec:
            continue
        by_proc = max(ok, key=lambda r: r["peak_mib"])["peak_by_process_mib"]
        rec.update(seconds=statistics.median(r["seconds"] for r in ok),
                   startup_s=statistics.median(r["startup_s"] for r in ok),
                   cpu_s=statistics.median(r["cpu_s"] for r in ok),
                   peak_mib=max(r["peak_mib"] for r in ok), peak_by_process_mib=by_proc,
                   others_cpu_share=max(r["others_cpu_share"] for r in ok),
                   outputs=ok[-1]["outputs"], reference=reference,
                   agree=None if ref_out is None else all(not r["differences"] for r in ok),
                   differing=sorted({name for r in ok for name in (r["differences"] or {})}))
        rec["events_per_s"] = n / rec["seconds"]
    return recs


# ---- the report ---------------------------------------------------------------------------------

def table(rows_in: List[Dict[str, Any]], rdd: Optional[Dict[str, Any]]) -> str:
    rows = []
    for rec in rows_in:
        label = LABELS[rec["contender"]]
        if "skipped" in rec:
            rows.append([label, f"{rec['events']:,}"] + ["-"] * 6 + [rec["skipped"]])
            continue
        if "error" in rec:
            rows.append([label, f"{rec['events']:,}"] + ["-"] * 6 + [f"ERROR: {rec['error'][:100]}"])
            continue
        ratio = rec["events_per_s"] / rdd["events_per_s"] if rdd and "events_per_s" in rdd else None
        split = "/".join(f"{rec['peak_by_process_mib'].get(k, 0):,.0f}" for k in ("driver", "jvm", "workers"))
        if rec["agree"] is None:
            agree = "no reference"
        elif rec["contender"] == rec["reference"]:
            agree = "(reference)"
        else:
            agree = "yes" if rec["agree"] else "NO: " + ", ".join(rec["differing"])
        if rec.get("beam_reference"):
            agree = "(reference for Beam)"
        rows.append([label, f"{rec['events']:,}", f"{rec['seconds']:.2f}", f"{rec['events_per_s']:,.0f}",
                     x(ratio), f"{rec['cpu_s']:.1f}", f"{rec['peak_mib']:,.0f}", split, agree])
    header = ["contender", "events", "seconds", "events/s", "vs RDD job", "CPU s", "peak MiB",
              "driver/JVM/workers MiB", "outputs agree"]
    return fmt_table(rows, header, right={1, 2, 3, 4, 5, 6, 7})


def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events for every contender but Beam")
    ap.add_argument("--beam-events", type=int, default=50_000,
                    help="events for Apache Beam (and for the headrace-local run compared with it)")
    ap.add_argument("--users", type=int, default=20_000, help="distinct users of the generated log")
    ap.add_argument("--chunk-events", type=int, default=0,
                    help="generate the input as independent logs of this many events each (seeds "
                         "--seed, --seed + 1, ...), a file each, one process per CPU: for inputs "
                         "too large to generate in memory, e.g. --events 100000000 --chunk-events "
                         "1000000 (default 0: one log)")
    ap.add_argument("--seed", type=int, default=2015, help="the generator's seed")
    ap.add_argument("--master", default="local[2]", help="Spark master of the Spark contenders")
    ap.add_argument("--shuffle-partitions", type=int, default=4,
                    help="spark.sql.shuffle.partitions, and the RDD job's reduce partitions")
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    ap.add_argument("--repeat", type=int, default=3, help="runs per contender; the median time is shown")
    ap.add_argument("--warmup", type=int, default=0,
                    help="untimed runs of the job in each Spark contender's session before the timed "
                         "one (a warmed JVM and Python workers; CPU s and peak MiB then include them)")
    ap.add_argument("--only", default=",".join(CONTENDERS),
                    help="comma-separated contenders among: " + ", ".join(CONTENDERS + OPTIONAL))
    ap.add_argument("--skip-beam", action="store_true", help="do not run Apache Beam")
    ap.add_argument("--beam-python", default=default_beam_python(),
                    help="python of a virtualenv with apache-beam (default: $BEAM_PYTHON or "
                         "the repository's .venv-beam/bin/python)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "headrace-general-path"),
                    help="where the input is generated and reused, and outputs are written "
                         "(default: %(default)s)")
    ap.add_argument("--runner-starts-spark", action="store_true",
                    help="headrace on Spark: let the SparkRunner start Spark (with headrace's JVM "
                         "and worker settings) inside the timed part instead of pre-starting a "
                         "SparkSession with the same settings")
    add_run_flags(ap)
    args = ap.parse_args(argv)
    args.contenders = [c for c in args.only.split(",") if c]
    for c in args.contenders:
        if c not in CONTENDERS + OPTIONAL:
            ap.error(f"unknown contender {c!r}; choose from {', '.join(CONTENDERS + OPTIONAL)}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    return args


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    beam_problem, beam_version = check_beam(args)
    machine = machine_description(beam_version)
    print("machine:")
    for k, v in machine.items():
        print(f"  {k:12s} {v}")
    print(f"spark: master {args.master}, spark.sql.shuffle.partitions={args.shuffle_partitions} (and the "
          f"RDD job's reduce partitions), spark.driver.memory={args.driver_memory}, spark.ui.enabled=false,"
          f"\n  PYSPARK_PYTHON={sys.executable}\n")
    os.makedirs(args.data_dir, exist_ok=True)

    main_group = [c for c in args.contenders if c != "beam"]
    n_beam = min(args.beam_events, args.events)
    run_beam = "beam" in args.contenders and not beam_problem
    if run_beam and n_beam == args.events:
        main_group.append("beam")
    rows: List[Dict[str, Any]] = []
    groups: Dict[str, Dict[str, Dict[str, Any]]] = {}
    if main_group:
        pattern = prepare_input(args.data_dir, args.events, args.users, args.seed, args.chunk_events)
        ref = "rdd" if "rdd" in main_group else main_group[0]
        print(f"\n{args.events:,} events; outputs compared with {LABELS[ref]}'s:")
        groups["main"] = run_group(args, main_group, args.events, pattern, ref)
        rows += groups["main"].values()
    if run_beam and n_beam != args.events:
        pattern = prepare_input(args.data_dir, n_beam, args.users, args.seed)
        print(f"\nBeam's input, {n_beam:,} events; outputs compared with {LABELS['headrace-local']}'s "
              "on the same input:")
        groups["beam"] = run_group(args, ["headrace-local", "beam"], n_beam, pattern, "headrace-local")
        rows.append(groups["beam"]["beam"])
        local_small = groups["beam"]["headrace-local"]
        local_small["beam_reference"] = True
        rows.append(local_small)
    elif "beam" in args.contenders and beam_problem:
        rows.append({"contender": "beam", "events": n_beam, "skipped": f"SKIPPED: {beam_problem}"})

    rdd = groups.get("main", {}).get("rdd")
    print(f"\ngeneral path: the demo-shaped job, {args.repeat} run(s) each (median seconds, largest peak)\n")
    print(table(rows, rdd))
    starts = ("Spark start-up excluded: each Spark contender starts its SparkSession first, with "
              "the same settings" if not args.runner_starts_spark else "Spark start-up included "
              "for headrace's contenders: their runner starts Spark, with the same settings, "
              "inside the time")
    print(f"""
seconds: the job: reading the JSON lines, every step, writing every output ({starts}).
vs RDD job: events/s over the hand-written RDD job's on {args.events:,} events (Beam and the
  headrace-local run it is compared with ran on {n_beam:,} events).
CPU s: user + system CPU seconds of the whole run's process tree (Spark start-up included), the
  median; less sensitive than seconds to other processes on the machine.
peak MiB: the largest sum of RSS over the run's process tree (driver Python + JVM + Python workers),
  sampled every 50 ms, split as driver/JVM/workers at that peak; pages shared between forked Python
  workers count in each.
outputs agree: all {len(OUTPUTS)} outputs of every run, normalised (records re-serialised with sorted
  keys, sorted), equal the reference's: {', '.join(OUTPUTS)}.""")
    busy = [f"{r['contender']} {r['others_cpu_share']:.0%}" for r in rows
            if "events_per_s" in r and r["others_cpu_share"] > BUSY_SHARE]
    if busy:
        print(f"note: other processes used the CPUs during these runs: {', '.join(busy)}; "
              "their timings are not clean (see --wait-idle).")

    problems = []
    for r in rows:
        what = f"{LABELS[r['contender']]} on {r['events']:,} events"
        if "error" in r:
            tail = "\n".join("    " + ln for ln in r["stderr_tail"].splitlines())
            problems.append(f"{what} crashed: {r['error']}\n{tail}")
        elif r.get("agree") is False:
            diffs = [run["differences"] for run in r["runs"] if run.get("differences")]
            problems.append(f"OUTPUTS DIFFER: {what} vs {LABELS[r['reference']]}:\n"
                            + json.dumps(diffs[0], indent=1)[:3000])
    return finish(args.json, {"machine": machine, "parameters": vars(args), "results": groups}, problems)


if __name__ == "__main__":
    sys.exit(main())
