"""Reading text files on Spark: headrace's splittable-DoFn read vs ReadFromText and hand-written PySpark.

    python benchmarks/sdf_reads.py [--file-mb 8] [--files 64] [--masters local[2],local-cluster[2,1,1024]]
        [--only dataframe,rdd,readfromtext,sdf,sdf-nostraggler,sdf-whole,sdf-whole-nostraggler,plain]
        [--layouts balanced,skewed] [--repeat 1] [--data-dir DIR] [--json PATH]

Two inputs of the same total bytes (--files x --file-mb MB), generated once into --data-dir
(default: a new temporary directory, removed at the end): `balanced`, --files files of equal
size, and `skewed`, one file holding half of the bytes plus --files - 1 small ones. Lines
are ASCII, 20 to 180 bytes. Every contender counts the lines and sums their lengths; both
numbers must equal the ones computed while writing the files (exit status 1 otherwise).

  dataframe              PySpark: spark.read.text(dir), count(*) and sum(length(value))
  rdd                    PySpark: sc.textFile(dir).map(len), count and sum
  readfromtext           headrace: ReadFromText(glob) (a BoundedSource split into byte ranges)
  sdf                    headrace: Create([glob]) | ReadAllFromText() (the splittable DoFn:
                         ranges of 64 MB balanced by size over the waves), straggler splitting on
  sdf-nostraggler        the same with --no_sdf_straggler_splitting
  sdf-whole              ReadAllFromText(desired_bundle_size=1 TB): one restriction per file, so
                         only the size-aware placement and straggler splitting balance the skew
  sdf-whole-nostraggler  the same with --no_sdf_straggler_splitting
  plain                  the same read without a splittable DoFn (the SDF's bookkeeping measured
                         against it): Create([glob]) | FlatMap(64 MB byte ranges) | Reshuffle |
                         FlatMap(read the range as ReadFromText does)

headrace contenders then run Map(lambda line: (1, len(line))) | CombineGlobally(sum of pairs).
Each master runs in a subprocess of its own (this script with --worker) that starts one
SparkSession; the times are of the jobs (Spark's start-up is not counted), median of --repeat
(run in rounds; each contender's two layouts back to back).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.dirname(HERE))  # the repo root, in case headrace is not installed

from _bench_env import REPO, headrace_revision  # noqa: E402

CONTENDERS = ("dataframe", "rdd", "readfromtext", "sdf", "sdf-nostraggler", "sdf-whole",
              "sdf-whole-nostraggler", "plain")
LAYOUTS = ("balanced", "skewed")
MB = 1024 * 1024
SKEW_TARGET = 1.3       # skewed within 1.3x of balanced, with straggler splitting
BOOKKEEPING_TARGET = 0.05


# ---- the input ----------------------------------------------------------------------------------

def _block() -> Tuple[bytes, int, int]:
    """About 64 kB of lines (20..180 ASCII bytes each): (bytes, lines, sum of line lengths)."""
    lines, n = [], 0
    i = 0
    while n < 64 * 1024:
        length = 20 + (i * 7919) % 161
        line = (f"{i:08d} " + "abcdefghijklmnopqrstuvwxyz" * 7)[:length]
        lines.append(line)
        n += length + 1
        i += 1
    return ("\n".join(lines) + "\n").encode("ascii"), len(lines), sum(len(x) for x in lines)


def write_layout(root: str, layout: str, files: int, file_mb: int) -> Dict[str, int]:
    """Writes one layout's files under root/layout; returns its expected lines and length sum."""
    block, lines, length = _block()
    per_file = max(1, file_mb * MB // len(block))
    total = per_file * files
    if layout == "balanced":
        counts = [per_file] * files
    else:
        big = total // 2
        rest = total - big
        small = [rest // (files - 1) + (1 if i < rest % (files - 1) else 0) for i in range(files - 1)]
        counts = [big] + small
    d = os.path.join(root, layout)
    os.makedirs(d, exist_ok=True)
    for i, n in enumerate(counts):
        with open(os.path.join(d, f"part-{i:03d}.txt"), "wb") as fh:
            for _ in range(n):
                fh.write(block)
    return {"lines": lines * total, "length": length * total, "bytes": len(block) * total}


# ---- the contenders (in the worker process) -------------------------------------------------------

def _pair_sum(pairs: Any) -> Tuple[int, int]:
    n = s = 0
    for a, b in pairs:
        n += a
        s += b
    return n, s


def _line_pair(line: str) -> Tuple[int, int]:
    return 1, len(line)


def _ranges(path: str) -> List[Tuple[str, int, int]]:
    from headrace.io.textio import _TextSource
    src = _TextSource("", validate=False)
    import glob
    return [r for f in sorted(glob.glob(path)) for r in src.ranges(f, 64 * MB)]


def _read_range(part: Tuple[str, int, int]) -> Any:
    from headrace.io.textio import _TextSource
    return _TextSource("", validate=False).read(tuple(part))


def run_headrace(contender: str, pattern: str, out: str) -> Dict[str, int]:
    import headrace as beam
    from headrace.io import ReadAllFromText, ReadFromText

    straggler = not contender.endswith("nostraggler")
    opts = beam.PipelineOptions(runner="SparkRunner", sdf_straggler_splitting=straggler)
    with beam.Pipeline(options=opts) as p:
        if contender == "readfromtext":
            lines = p | ReadFromText(pattern)
        elif contender == "plain":
            lines = (p | beam.Create([pattern]) | beam.FlatMap(_ranges) | beam.Reshuffle()
                     | beam.FlatMap(_read_range))
        else:
            size = 2 ** 40 if contender.startswith("sdf-whole") else 64 * MB
            lines = p | beam.Create([pattern]) | ReadAllFromText(desired_bundle_size=size)
        _ = (lines | beam.Map(_line_pair) | beam.CombineGlobally(_pair_sum)
             | beam.Map(lambda r, out=out: open(out, "w").write(json.dumps(list(r)))))
    with open(out) as fh:
        n, s = json.load(fh)
    return {"lines": n, "length": s}


def run_contender(spark: Any, contender: str, directory: str, out: str) -> Dict[str, int]:
    if contender == "dataframe":
        from pyspark.sql import functions as F
        row = spark.read.text(directory).select(F.count("*"), F.sum(F.length("value"))).collect()[0]
        return {"lines": int(row[0]), "length": int(row[1] or 0)}
    if contender == "rdd":
        n, s = (spark.sparkContext.textFile(directory).map(lambda x: (1, len(x)))
                .reduce(lambda a, b: (a[0] + b[0], a[1] + b[1])))
        return {"lines": n, "length": s}
    return run_headrace(contender, os.path.join(directory, "*.txt"), out)


def worker(args: argparse.Namespace) -> None:
    """Runs every (layout, contender) on one master; prints `RESULT {json}` lines."""
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master(args.worker).appName("bench-sdf-reads")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.driver.memory", "2g").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    out = os.path.join(args.data_dir, f"result-{os.getpid()}.json")
    warm = os.path.join(args.data_dir, "warm-up")  # untimed: executors and Python workers up
    if not os.path.isdir(warm):
        os.makedirs(warm)
        with open(os.path.join(warm, "part-000.txt"), "w") as fh:
            fh.write("warm\nup\n")
    for contender in args.only.split(","):
        run_contender(spark, contender, warm, out)
    # each contender's layouts one after the other, and the repeats in rounds: a machine whose
    # load drifts skews the ratios less
    for i in range(args.repeat):
        for contender in args.only.split(","):
            for layout in args.layouts.split(","):
                t0 = time.perf_counter()
                got = run_contender(spark, contender, os.path.join(args.data_dir, layout), out)
                seconds = time.perf_counter() - t0
                print("RESULT " + json.dumps({"layout": layout, "contender": contender, "run": i,
                                              "seconds": seconds, "checksum": got}), flush=True)
    spark.stop()


# ---- the driver -----------------------------------------------------------------------------------

def run_master(args: argparse.Namespace, master: str) -> List[Dict[str, Any]]:
    env = dict(os.environ)
    env["PYSPARK_PYTHON"] = env["PYSPARK_DRIVER_PYTHON"] = sys.executable
    env["PYTHONPATH"] = os.pathsep.join([HERE, REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", master, "--data-dir", args.data_dir,
           "--only", args.only, "--layouts", args.layouts, "--repeat", str(args.repeat)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=REPO)
    results = []
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.startswith("RESULT "):
            r = json.loads(line[len("RESULT "):])
            r["master"] = master
            print(f"  {master:24s} {r['layout']:8s} {r['contender']:22s} {r['seconds']:7.2f} s",
                  flush=True)
            results.append(r)
    if proc.wait() != 0:
        print(f"  {master}: the worker exited with status {proc.returncode}", file=sys.stderr)
    return results


def table(results: List[Dict[str, Any]], expected: Dict[str, Dict[str, int]], total_mb: float
          ) -> Tuple[str, bool]:
    """The report (markdown) and whether every checksum matched."""
    ok = True
    med: Dict[Tuple[str, str, str], float] = {}
    for key in {(r["master"], r["layout"], r["contender"]) for r in results}:
        runs = [r for r in results if (r["master"], r["layout"], r["contender"]) == key]
        med[key] = statistics.median(r["seconds"] for r in runs)
        for r in runs:
            want = {k: expected[r["layout"]][k] for k in ("lines", "length")}
            if r["checksum"] != want:
                ok = False
                print(f"CHECKSUM DIFFERS: {key}: {r['checksum']} != {want}", file=sys.stderr)
    masters = list(dict.fromkeys(r["master"] for r in results))
    contenders = list(dict.fromkeys(r["contender"] for r in results))
    rows = ["| master | contender | balanced s | skewed s | skewed / balanced | MB/s (balanced) |",
            "|---|---|---:|---:|---:|---:|"]
    for m in masters:
        for c in contenders:
            b, s = med.get((m, "balanced", c)), med.get((m, "skewed", c))
            ratio = f"{s / b:.2f}" if b and s else "-"
            rate = f"{total_mb / b:.0f}" if b else "-"
            rows.append(f"| {m} | {c} | {b or 0:.2f} | {s or 0:.2f} | {ratio} | {rate} |")
    notes = []
    for m in masters:
        b, s = med.get((m, "balanced", "sdf")), med.get((m, "skewed", "sdf"))
        if b and s:
            notes.append(f"{m}: sdf skewed/balanced {s / b:.2f} (target <= {SKEW_TARGET})")
        ws, wb = med.get((m, "skewed", "sdf-whole")), med.get((m, "balanced", "sdf-whole"))
        if ws and wb:
            notes.append(f"{m}: sdf-whole skewed/balanced {ws / wb:.2f}")
        r, sd = med.get((m, "balanced", "readfromtext")), med.get((m, "balanced", "sdf"))
        if r and sd:
            notes.append(f"{m}: sdf / readfromtext on balanced {sd / r:.2f} (target <= 1)")
        pl = med.get((m, "balanced", "plain"))
        if pl and sd:
            notes.append(f"{m}: SDF bookkeeping (sdf / plain - 1) {sd / pl - 1:+.1%} "
                         f"(target < {BOOKKEEPING_TARGET:.0%})")
    return "\n".join(rows + [""] + [f"* {n}" for n in notes]), ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--file-mb", type=int, default=8, help="MB per file of the balanced layout (8)")
    ap.add_argument("--files", type=int, default=64, help="files per layout (64)")
    ap.add_argument("--masters", default="local[2],local-cluster[2,1,1024]",
                    help="Spark masters, comma-separated")
    ap.add_argument("--only", default=",".join(CONTENDERS), help="contenders, comma-separated")
    ap.add_argument("--layouts", default=",".join(LAYOUTS), help="balanced,skewed")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each contender (median)")
    ap.add_argument("--data-dir", default=None, help="where to write the input (default: a temp dir)")
    ap.add_argument("--json", default=None, help="also write the results to this JSON file")
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    own = args.data_dir is None
    args.data_dir = args.data_dir or tempfile.mkdtemp(prefix="headrace-sdf-reads-")
    try:
        print(f"headrace {headrace_revision()}; writing {args.files} x {args.file_mb} MB per layout "
              f"to {args.data_dir}", flush=True)
        expected = {lay: write_layout(args.data_dir, lay, args.files, args.file_mb)
                    for lay in args.layouts.split(",")}
        results: List[Dict[str, Any]] = []
        for master in re.split(r",(?![^\[]*\])", args.masters):  # not the commas in [...]
            results += run_master(args, master)
        total_mb = next(iter(expected.values()))["bytes"] / MB
        report, ok = table(results, expected, total_mb)
        print(f"\n{total_mb:.0f} MB per layout; seconds of the job (median of {args.repeat})\n")
        print(report)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump({"expected": expected, "results": results}, fh, indent=1)
    finally:
        if own:
            shutil.rmtree(args.data_dir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
