"""Windowed sum per key on Spark: headrace's SparkRunner vs hand-written PySpark and Apache Beam.

    python benchmarks/spark_windowed_sum.py [--events 10000000] [--keys 1000] [--beam-events 1000000]
        [--master local[2]] [--only dataframe,rdd,headrace,beam] [--pipelines fixed,sessions]
        [--skip-beam] [--data-dir DIR] [--repeat 1] [--mem-sizes 2000000,10000000] [--json PATH]
        [--spread bursty|even] [--warmup 0]

Input: Parquet files of bursty events (key, value 1..100, ts_ms) over one week, generated once with
numpy and cached in --data-dir (see _spark_bench_common.py); `--spread even` spreads them evenly
over the keys and the week instead. Two pipelines, a sum per key in
FixedWindows(1 hour) and in Sessions(10 minutes), each computed by four contenders:

  dataframe  PySpark DataFrame: groupBy(key, window(...) or session_window(...)).agg(sum(value))
  rdd        PySpark RDD of Rows with Python lambdas: reduceByKey, or groupByKey + merge sessions
  headrace   ReadFromParquet | Map(TimestampedValue) | WindowInto | CombinePerKey(sum) | ParDo
             on headrace's SparkRunner
  beam       the same pipeline text on Apache Beam's Python DirectRunner, on the first
             --beam-events events (it is slow), in Beam's own virtualenv

Each run is its own subprocess (_spark_bench_worker.py); this process samples the RSS of the
worker's whole process tree (driver Python, JVM, Python workers) every 50 ms. Every contender
reports a checksum (output windows, total of the sums, digest of every (key, window start, sum))
that is compared with a numpy reference. Exit status 1 if a contender crashed or a checksum other
than Spark's session_window differs from the reference.

Memory check: headrace's fixed-window combine at two input sizes (--mem-sizes, same keys and
windows); PASS if the larger run's peak memory is within 1.25x of the smaller's.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from typing import Any, Dict, List, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import (  # noqa: E402
    BEAM_VENV_HINT, REPO, beam_usable, default_beam_python, headrace_revision,
)
from _spark_bench_common import (  # noqa: E402
    PIPELINE_LABELS, PIPELINES, SPREADS, TreeMemorySampler, kill_tree, prepare_datasets, reference_checksums,
    add_run_flags, finish, wait_until_idle,
)
from _spark_bench_worker import CONNECT, CONTENDERS  # noqa: E402

WORKER = os.path.join(HERE, "_spark_bench_worker.py")
LABELS = {"dataframe": "PySpark DataFrame", "rdd": "PySpark RDD (lambdas)",
          "headrace": "headrace SparkRunner", "beam": "Beam DirectRunner",
          "dataframe-connect": "DataFrame, Connect", "headrace-connect": "headrace, Connect"}
MIB = 2 ** 20
MEM_TOLERANCE = 1.25
TARGET_VS_DATAFRAME = {"fixed": 0.5, "sessions": 1.0}
TARGET_VS_BEAM = 50.0
BUSY_SHARE = 0.1  # a run during which other processes used more of the CPUs was not alone


# ---- the machine --------------------------------------------------------------------------------

def _first_line(cmd: List[str]) -> str:
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unknown ({e})"
    lines = (r.stdout + r.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_description(beam: str) -> Dict[str, str]:
    import psutil

    cpu = "unknown"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), cpu)
    except OSError:
        pass
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    return {
        "cpu": cpu,
        "cores": str(os.cpu_count()),
        "ram": f"{psutil.virtual_memory().total / 2 ** 30:.1f} GiB",
        "os": platform.platform(),
        "python": f"{sys.version.split()[0]} ({sys.executable})",
        "java": _first_line([java, "-version"]),
        "pyspark": _version("pyspark"),
        "pyarrow": _version("pyarrow"),
        "numpy": _version("numpy"),
        "apache-beam": beam,
        "headrace": headrace_revision(),
    }


# ---- running one contender ----------------------------------------------------------------------

def worker_env(spark: bool) -> Dict[str, str]:
    env = dict(os.environ)
    if spark:
        env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PYTHONPATH"] = os.pathsep.join([HERE, REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def run_worker(cmd: List[str], env: Dict[str, str], timeout: float,
               cwd: Optional[str] = None) -> Dict[str, Any]:
    """Runs one worker (in `cwd`, default the repository), sampling its process tree's memory;
    returns its RESULT plus measurements."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, cwd=cwd or REPO)
        sampler = TreeMemorySampler(proc.pid)
        sampler.start()
        timed_out = False
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            kill_tree(proc.pid)
            rc = proc.wait()
        wall = time.perf_counter() - t0
        sampler.stop()
        sampler.reap()
        out.seek(0)
        err.seek(0)
        results = [ln[len("RESULT "):] for ln in out.read().splitlines() if ln.startswith("RESULT ")]
        stderr = err.read()
    if timed_out:
        res: Dict[str, Any] = {"error": f"timed out after {timeout:.0f}s"}
    elif results:
        res = json.loads(results[-1])
    else:
        res = {"error": f"exit status {rc} without a result"}
    if "error" in res:
        res["stderr_tail"] = "\n".join(stderr.strip().splitlines()[-30:])
    res.update(wall_s=wall, peak_mib=sampler.peak / MIB, load_before=load,
               cpu_s=sum(sampler.cpu_seconds.values()),
               others_cpu_share=sampler.others_cpu_share,
               peak_by_process_mib={k: v / MIB for k, v in sampler.at_peak.items()},
               max_processes=sampler.max_processes, memory_samples=sampler.samples)
    return res


def measure(args: argparse.Namespace, contender: str, pipeline: str, n: int, path: str,
            expected: Dict[str, int]) -> Dict[str, Any]:
    """--repeat runs of one contender; the median time, the largest peak memory."""
    python = args.beam_python if contender == "beam" else sys.executable
    cmd = [python, WORKER, "--contender", contender, "--pipeline", pipeline, "--input", path,
           "--master", args.master, "--shuffle-partitions", str(args.shuffle_partitions),
           "--driver-memory", args.driver_memory]
    if args.runner_starts_spark:
        cmd.append("--runner-starts-spark")
    if contender == "headrace":
        cmd += [f"--headrace-option={flag}" for flag in args.headrace_option or []]
    if args.warmup and contender != "beam":
        cmd += ["--warmup", str(args.warmup)]
    rec: Dict[str, Any] = {"contender": contender, "pipeline": pipeline, "events": n, "input": path,
                           "expected": expected, "runs": []}
    for i in range(args.repeat):
        tag = f" (run {i + 1}/{args.repeat})" if args.repeat > 1 else ""
        print(f"  {LABELS[contender]:21s} {PIPELINE_LABELS[pipeline]:20s} {n:>11,} events{tag} ...",
              end=" ", flush=True)
        if args.wait_idle:
            wait_until_idle(args.wait_idle)
        r = run_worker(cmd, worker_env(contender != "beam"), args.timeout)
        rec["runs"].append(r)
        if "error" in r:
            print(f"ERROR: {r['error']}")
            rec["error"] = r["error"]
            rec["stderr_tail"] = r["stderr_tail"]
            return rec
        ok = r["checksum"] == expected
        print(f"{r['seconds']:.2f}s (+{r['startup_s']:.1f}s start-up), {n / r['seconds']:,.0f} events/s, "
              f"peak {r['peak_mib']:,.0f} MiB, {'matches' if ok else 'DIFFERS FROM'} the reference; "
              f"other processes used {r['others_cpu_share']:.0%} of the CPUs")
    runs = rec["runs"]
    rec.update(seconds=statistics.median(r["seconds"] for r in runs),
               startup_s=statistics.median(r["startup_s"] for r in runs),
               peak_mib=max(r["peak_mib"] for r in runs),
               others_cpu_share=max(r["others_cpu_share"] for r in runs),
               checksum=runs[-1]["checksum"],
               matches=all(r["checksum"] == expected for r in runs))
    rec["events_per_s"] = n / rec["seconds"]
    return rec


# ---- the report ---------------------------------------------------------------------------------

def fmt_table(rows: List[List[str]], header: List[str], right: set) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: List[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(header), "  ".join("-" * w for w in widths)] + [line(r) for r in rows])


def measured(rec: Optional[Dict[str, Any]]) -> bool:
    return rec is not None and "events_per_s" in rec


def ratio(a: Optional[Dict[str, Any]], b: Optional[Dict[str, Any]]) -> Optional[float]:
    return a["events_per_s"] / b["events_per_s"] if measured(a) and measured(b) else None


def x(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.2f}x" if r < 10 else f"{r:.0f}x"


def describe_mismatch(got: Dict[str, int], expected: Dict[str, int]) -> str:
    diffs = [f"{got[k]:,} {k}, expected {expected[k]:,}"
             for k in ("windows", "total") if got[k] != expected[k]]
    return "NO: " + ("; ".join(diffs) if diffs else "the digest differs")


def pipeline_table(pipeline: str, recs: Dict[str, Dict[str, Any]]) -> str:
    rows = []
    for contender, rec in recs.items():
        label = LABELS[contender] + (" (session_window)" if contender == "dataframe" and
                                     pipeline == "sessions" else "")
        if "skipped" in rec:
            rows.append([label, f"{rec['events']:,}"] + ["-"] * 7 + [rec["skipped"]])
            continue
        if "error" in rec:
            rows.append([label, f"{rec['events']:,}"] + ["-"] * 5
                        + [f"{rec['runs'][-1]['peak_mib']:,.0f}", "-", f"ERROR: {rec['error'][:110]}"])
            continue
        match = "yes" if rec["matches"] else describe_mismatch(rec["checksum"], rec["expected"])
        if not rec["matches"] and contender == "dataframe" and pipeline == "sessions":
            match += " (see note)"
        startup = "-" if contender == "beam" else f"{rec['startup_s']:.1f}"
        rows.append([label, f"{rec['events']:,}", startup, f"{rec['seconds']:.2f}",
                     f"{rec['events_per_s']:,.0f}", x(ratio(rec, recs.get("dataframe"))),
                     x(ratio(rec, recs.get("beam"))), f"{rec['peak_mib']:,.0f}",
                     f"{rec['checksum']['windows']:,}", match])
    header = ["contender", "events", "start-up s", "seconds", "events/s", "vs DataFrame", "vs Beam",
              "peak MiB", "windows", "matches reference"]
    return fmt_table(rows, header, right={1, 2, 3, 4, 5, 6, 7, 8})


def targets(results: Dict[str, Dict[str, Dict[str, Any]]]) -> List[Dict[str, Any]]:
    """The issue's targets: headrace vs PySpark DataFrame (same input) and vs Beam (events/s)."""
    out = []
    for pipeline, recs in results.items():
        hr = recs.get("headrace")
        for base, need in (("dataframe", TARGET_VS_DATAFRAME[pipeline]), ("beam", TARGET_VS_BEAM)):
            name = (f"headrace {PIPELINE_LABELS[pipeline]} >= {need:g}x {LABELS[base]}"
                    + (" session_window" if base == "dataframe" and pipeline == "sessions" else ""))
            b = recs.get(base)
            if hr is None:
                verdict, value = "n/a (headrace not run)", None
            elif "error" in hr:
                verdict, value = "FAIL (headrace failed)", None
            elif not measured(b):
                verdict, value = f"n/a (no {LABELS[base]} measurement)", None
            else:
                value = ratio(hr, b)
                verdict = "PASS" if value >= need else "FAIL"
                if not hr["matches"]:
                    verdict += " (but headrace's checksum is wrong)"
            out.append({"target": name, "required": need, "measured": value, "verdict": verdict})
        hc = recs.get("headrace-connect")
        if hc is not None:   # issue 34: bounded pipelines over Spark Connect within 1.25x of classic
            name = f"headrace {PIPELINE_LABELS[pipeline]} over Spark Connect >= 0.8x the classic runner"
            if not measured(hc) or not measured(hr):
                verdict, value = "n/a (not both measured)", None
            else:
                value = ratio(hc, hr)
                verdict = ("PASS" if value >= 0.8 else "FAIL") + (
                    "" if hc["matches"] else " (but its checksum is wrong)")
            out.append({"target": name, "required": 0.8, "measured": value, "verdict": verdict})
    return out


# ---- main ---------------------------------------------------------------------------------------

def parse_args(argv: Optional[List[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=10_000_000, help="events for the Spark contenders")
    ap.add_argument("--keys", type=int, default=1000, help="distinct keys")
    ap.add_argument("--beam-events", type=int, default=1_000_000, help="events for Apache Beam")
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--spread", default="bursty", choices=sorted(SPREADS),
                    help="bursty: each key's events in visits of a few minutes (the default); "
                         "even: every key and millisecond of the week equally likely")
    ap.add_argument("--warmup", type=int, default=0,
                    help="untimed runs of each Spark contender's job in its session before the "
                         "timed one (a warmed JVM)")
    ap.add_argument("--master", default="local[2]", help="Spark master of the Spark contenders")
    ap.add_argument("--shuffle-partitions", type=int, default=4, help="spark.sql.shuffle.partitions, and "
                    "the RDD contender's reduce partitions")
    ap.add_argument("--driver-memory", default="2g", help="spark.driver.memory")
    ap.add_argument("--only", default=",".join(c for c in CONTENDERS if c not in CONNECT),
                    help="comma-separated contenders among: " + ", ".join(CONTENDERS) + " (the "
                         "last two over Spark Connect, a server started in the worker's process; "
                         "default: the others)")
    ap.add_argument("--pipelines", default=",".join(PIPELINES), help="comma-separated: fixed, sessions")
    ap.add_argument("--skip-beam", action="store_true", help="do not run Apache Beam")
    ap.add_argument("--beam-python", default=default_beam_python(),
                    help="python of a virtualenv with apache-beam (default: $BEAM_PYTHON or "
                         "the repository's .venv-beam/bin/python)")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "headrace-spark-windowed-sum"),
                    help="where the input is generated and reused (default: %(default)s)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per contender; the median time is shown")
    ap.add_argument("--mem-sizes", default="2000000,10000000",
                    help="the two input sizes of the memory check ('' to skip it)")
    ap.add_argument("--skip-mem", action="store_true", help="skip the memory check")
    ap.add_argument("--headrace-option", action="append", default=None, metavar="FLAG",
                    help="a pipeline flag for the headrace contender (repeatable), e.g. "
                         "--headrace-option=--record_panes=DIR")
    ap.add_argument("--runner-starts-spark", action="store_true",
                    help="headrace: let the SparkRunner start Spark inside the timed part instead of "
                         "pre-starting a SparkSession with the same settings")
    add_run_flags(ap)
    args = ap.parse_args(argv)
    args.contenders = [c for c in args.only.split(",") if c]
    args.pipeline_list = [p for p in args.pipelines.split(",") if p]
    args.mem_size_list = sorted({int(s) for s in args.mem_sizes.split(",") if s})
    for c in args.contenders:
        if c not in CONTENDERS:
            ap.error(f"unknown contender {c!r}; choose from {', '.join(CONTENDERS)}")
    for p in args.pipeline_list:
        if p not in PIPELINES:
            ap.error(f"unknown pipeline {p!r}; choose from {', '.join(PIPELINES)}")
    if args.mem_size_list and len(args.mem_size_list) != 2:
        ap.error("--mem-sizes takes two different sizes, e.g. 2000000,10000000")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    return args


def check_beam(args: argparse.Namespace) -> Tuple[Optional[str], str]:
    """(why Beam cannot run or None, the Beam version for the machine description)."""
    if "beam" not in args.contenders:
        return "not selected (--only)", "not used"
    problem = "--skip-beam given" if args.skip_beam else beam_usable(args.beam_python)
    if problem:
        if not args.skip_beam:
            print(f"!! Apache Beam is SKIPPED: {problem}. Create a Beam virtualenv with:\n"
                  f"!!   {BEAM_VENV_HINT}\n!! and pass --beam-python (or set BEAM_PYTHON).\n")
        return problem, f"not available: {problem}"
    version = _first_line([args.beam_python, "-c", "import apache_beam; print(apache_beam.__version__)"])
    return None, f"{version} ({args.beam_python})"


def memory_check(args: argparse.Namespace, results, paths, refs) -> Dict[str, Any]:
    """headrace's fixed-window combine at the two --mem-sizes (reusing the main run of that size)."""
    print(f"\nmemory check, headrace {PIPELINE_LABELS['fixed']} at "
          f"{' and '.join(f'{n:,}' for n in args.mem_size_list)} events:")
    runs = []
    for n in args.mem_size_list:
        earlier = results.get("fixed", {}).get("headrace")
        if earlier is not None and n == args.events:
            print(f"  {n:,} events: the {PIPELINE_LABELS['fixed']} run above")
            runs.append(dict(earlier, reused=True))
        else:
            runs.append(measure(args, "headrace", "fixed", n, paths[n], refs[n]["fixed"]))
    mem: Dict[str, Any] = {"runs": runs, "tolerance": MEM_TOLERANCE, "ratio": None}
    small, large = runs
    if "error" in small or "error" in large:
        mem["verdict"] = "FAIL (headrace failed)"
    else:
        mem["ratio"] = large["peak_mib"] / small["peak_mib"]
        mem["verdict"] = "PASS" if mem["ratio"] <= MEM_TOLERANCE else "FAIL"
    return mem


def print_notes(args: argparse.Namespace, results, refs, n_beam: int) -> None:
    beam_ran = any(measured(recs.get("beam")) for recs in results.values())
    started = ("a SparkSession with the same\n  settings as the others, started before the pipeline; "
               "the runner uses it as it is" if not args.runner_starts_spark else
               "0, the runner starts\n  Spark inside `seconds`")
    print(f"""
seconds: the job alone: reading the Parquet input, the windowed sum, the checksum of its output.
start-up s: SparkSession start-up, not in seconds (headrace: {started}).
peak MiB: the largest sum of RSS over the worker's process tree (driver Python + JVM + Python
  workers), sampled every 50 ms; pages shared between processes (forked Python workers) count in each.
vs DataFrame / vs Beam: events/s over theirs on the same pipeline""" +
          (f";\n  Beam runs on the first {n_beam:,} events only." if n_beam != args.events and beam_ran
           else "."))
    df = results.get("sessions", {}).get("dataframe")
    if measured(df):
        state = "DIFFERS from the reference here" if not df["matches"] else "matches the reference here"
        pairs = refs[df["events"]]["pairs_exactly_gap_apart"]
        print(f"""note: Spark's session_window {state}. Spark's sessions are not Beam's Sessions:
  Spark keeps a session open while the next event is within the gap of the last one, inclusive, so
  two events exactly 10 minutes apart share a session in Spark and not in Beam (windows [t, t + gap)
  merge only when they overlap); this input has {pairs} such pair(s) of consecutive events of a key.
  A session_window mismatch is reported, not fatal.""")
    busy = [f"{c}/{p} {r['others_cpu_share']:.0%}" for p, recs in results.items() for c, r in recs.items()
            if measured(r) and r["others_cpu_share"] > BUSY_SHARE]
    if busy:
        print("note: other processes used the CPUs during these runs (share of all CPU time, at worst):")
        print(textwrap.fill(", ".join(busy) + "; their timings are not clean (see --wait-idle).",
                            width=100, initial_indent="  ", subsequent_indent="  "))


def print_memory_check(args: argparse.Namespace, mem: Dict[str, Any]) -> None:
    print(f"\nmemory check: a combine pipeline's peak memory does not grow with the number of values per "
          f"key\n(headrace {PIPELINE_LABELS['fixed']}, {args.keys} keys, the same windows)")
    for r in mem["runs"]:
        detail = (f"ERROR: {r['error']}" if "error" in r else
                  f"peak {r['peak_mib']:,.0f} MiB, {r['checksum']['windows']:,} windows, {r['seconds']:.1f}s")
        print(f"  {r['events']:>11,} events: {detail}")
    shown = "-" if mem["ratio"] is None else f"{mem['ratio']:.2f}x"
    print(f"  larger / smaller peak: {shown} (at most {MEM_TOLERANCE}x required)  {mem['verdict']}")


def problems_of(recs: List[Dict[str, Any]]) -> List[str]:
    """Crashes and checksum mismatches (except Spark's session_window, which is only reported)."""
    out = []
    for r in recs:
        what = f"{LABELS[r['contender']]} {r['pipeline']} on {r['events']:,} events"
        known_difference = (r["contender"], r["pipeline"]) == ("dataframe", "sessions")
        if "error" in r:
            tail = "\n".join("    " + ln for ln in r["stderr_tail"].splitlines())
            out.append(f"{what} crashed: {r['error']}\n{tail}")
        elif measured(r) and not r["matches"] and not known_difference:
            out.append(f"CHECKSUM MISMATCH: {what} got {r['checksum']}, expected {r['expected']}")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    beam_problem, beam_version = check_beam(args)
    run_mem = bool(args.mem_size_list) and not args.skip_mem and "headrace" in args.contenders

    machine = machine_description(beam_version)
    print("machine:")
    for k, v in machine.items():
        print(f"  {k:12s} {v}")
    print(f"spark: master {args.master}, spark.sql.shuffle.partitions={args.shuffle_partitions}, "
          f"spark.driver.memory={args.driver_memory}, spark.ui.enabled=false,\n"
          f"  PYSPARK_PYTHON={sys.executable}")

    # the input: every dataset is a prefix of one universe, so all sizes share one week of activity
    n_beam = min(args.beam_events, args.events)
    universe = max([args.events, n_beam] + args.mem_size_list)
    sizes = {args.events} | (set() if beam_problem else {n_beam})
    sizes |= set(args.mem_size_list) if run_mem else set()
    print()
    paths = prepare_datasets(args.data_dir, universe, args.keys, args.seed, sorted(sizes),
                             spread=args.spread)
    t0 = time.perf_counter()
    refs = {n: reference_checksums(paths[n]) for n in sorted(sizes)}
    print(f"reference checksums (numpy) in {time.perf_counter() - t0:.1f}s, cached in _reference.json:")
    for n in sorted(sizes):
        spk = refs[n]["sessions_per_key"]
        print(f"  {n:>11,} events: {refs[n]['fixed']['windows']:,} hourly windows, "
              f"{refs[n]['sessions']['windows']:,} sessions; sessions per key min {spk['min']}, "
              f"median {spk['median']:.0f}, max {spk['max']}; median events per session "
              f"{refs[n]['events_per_session_median']:.0f}")

    # the contenders, one subprocess each, one after another
    results: Dict[str, Dict[str, Dict[str, Any]]] = {}
    for pipeline in args.pipeline_list:
        print(f"\n{PIPELINE_LABELS[pipeline]}:")
        results[pipeline] = {}
        for contender in args.contenders:
            n = n_beam if contender == "beam" else args.events
            if contender == "beam" and beam_problem:
                results[pipeline][contender] = {"contender": contender, "pipeline": pipeline, "events": n,
                                                "skipped": f"not available: {beam_problem}"}
                continue
            results[pipeline][contender] = measure(args, contender, pipeline, n, paths[n], refs[n][pipeline])
    mem = memory_check(args, results, paths, refs) if run_mem else {}

    # the report
    for pipeline, recs in results.items():
        print(f"\n{PIPELINE_LABELS[pipeline]}\n")
        print(pipeline_table(pipeline, recs))
    print_notes(args, results, refs, n_beam)
    checks = targets(results)
    if checks:
        print("\ntargets:")
        width = max(len(t["target"]) for t in checks)
        for t in checks:
            print(f"  {t['target']:{width}s}  {x(t['measured']):>6s}  {t['verdict']}")
    if mem:
        print_memory_check(args, mem)

    problems = problems_of([r for recs in results.values() for r in recs.values()]
                           + [r for r in mem.get("runs", []) if not r.get("reused")])
    return finish(args.json, {
        "machine": machine, "parameters": vars(args),
        "datasets": {str(n): {"path": paths[n], "reference": refs[n]} for n in sorted(sizes)},
        "results": results, "targets": checks, "memory_check": mem}, problems)


if __name__ == "__main__":
    sys.exit(main())
