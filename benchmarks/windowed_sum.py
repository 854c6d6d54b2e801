"""Windowed sum per key: headrace's local runner vs Apache Beam's Python DirectRunner.

    python benchmarks/windowed_sum.py [--events 1000000] [--keys 1000] [--beam-events 200000]

Input: N events (key, integer value, timestamp), timestamps uniform at random over one week of
event time (millisecond resolution, fixed seed), generated once into a pickle in a temp dir
that every worker reads. Two pipelines, the same source text for both SDKs
(_windowed_sum_common.build_and_run):

    Create(events) -> Map(TimestampedValue((key, value), ts)) -> WindowInto(FixedWindows(3600)
    or Sessions(600)) -> CombinePerKey(sum) -> ParDo(Checksum) (counts windows, sums, digest)

Each contender runs in its own subprocess (Beam in its own virtualenv, headrace under this
interpreter) and reports the time of pipeline construction + run, and the process's peak RSS.
Beam is slow, so it runs on the first --beam-events events; headrace runs on that same subset
(so the checksums can be compared exactly) and on all --events. Every run's checksum (number of
output windows, total sum, and a digest of every (key, window, sum)) is checked against a
plain-Python reference; any difference fails the run (exit status 1).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import (  # noqa: E402
    BEAM_VENV_HINT, beam_usable, default_beam_python, headrace_revision,
)
from _windowed_sum_common import PIPELINE_LABELS, PIPELINES  # noqa: E402

TARGET = 10.0


def run_worker(python: str, worker: str, data: str, pipeline: str) -> Dict[str, Any]:
    cmd = [python, os.path.join(HERE, worker), "--input", data, "--pipeline", pipeline]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode != 0 or not lines:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-25:])
        return {"error": f"exit status {r.returncode}: {' '.join(cmd)}\n{tail}"}
    out = json.loads(lines[-1])
    out["wall_s"] = wall
    return out


def fmt_table(rows: List[List[str]], header: List[str], right: set) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: List[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), sep] + [line(r) for r in rows])


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events for the full headrace run")
    ap.add_argument("--keys", type=int, default=1000, help="distinct keys")
    ap.add_argument("--beam-events", type=int, default=200_000,
                    help="events for the Beam run (and the matching headrace run)")
    ap.add_argument("--seed", type=int, default=20240501)
    ap.add_argument("--pipelines", default=",".join(PIPELINES),
                    help="comma-separated subset of: " + ", ".join(PIPELINES))
    ap.add_argument("--beam-python", default=default_beam_python(),
                    help="python of a virtualenv with apache-beam (default: $BEAM_PYTHON or "
                         "the repository's .venv-beam/bin/python)")
    ap.add_argument("--skip-beam", action="store_true", help="run headrace only")
    ap.add_argument("--keep-data", action="store_true", help="keep the generated input files")
    args = ap.parse_args(argv)
    pipelines = [p for p in args.pipelines.split(",") if p]
    for p in pipelines:
        if p not in PIPELINES:
            ap.error(f"unknown pipeline {p!r}; choose from {PIPELINES}")
    n_full = args.events
    n_beam = min(args.beam_events, n_full)

    beam_problem = "--skip-beam given" if args.skip_beam else beam_usable(args.beam_python)
    if beam_problem:
        print(f"!! Apache Beam rows are SKIPPED: {beam_problem}.")
        if not args.skip_beam:
            print(f"!! Run this with ./dev bench windowed_sum, which creates .venv-beam, or create a Beam\n"
                  f"!! virtualenv with:  {BEAM_VENV_HINT}\n"
                  f"!! then pass --beam-python .venv-beam/bin/python (or set BEAM_PYTHON).")
        print()

    print(f"headrace revision: {headrace_revision()}")
    print(f"python: {sys.executable} ({sys.version.split()[0]}); beam python: "
          f"{'-' if beam_problem else args.beam_python}")
    tmp = tempfile.mkdtemp(prefix="windowed-sum-")
    try:
        sizes = sorted({n_full} | ({n_beam} if not beam_problem else set()))
        prep = subprocess.run(
            [sys.executable, os.path.join(HERE, "_windowed_sum_common.py"), "--dir", tmp,
             "--events", str(n_full), "--keys", str(args.keys), "--seed", str(args.seed),
             "--sizes", ",".join(map(str, sizes)), "--pipelines", ",".join(pipelines)],
            capture_output=True, text=True)
        if prep.returncode != 0:
            print(prep.stderr, file=sys.stderr)
            return 1
        prepared = json.loads(prep.stdout)
        files = {int(n): f for n, f in prepared["files"].items()}
        expected = {(k.split("/")[0], int(k.split("/")[1])): v
                    for k, v in prepared["expected"].items()}
        print(f"generated {n_full:,} events over {args.keys} keys (seed {args.seed}) and the "
              f"reference checksums in {prepared['seconds']:.1f}s -> {tmp} (not timed)")

        results: List[Dict[str, Any]] = []
        failures: List[str] = []
        for p in pipelines:
            plan = []
            if not beam_problem:
                plan += [("beam", args.beam_python, "_beam_worker.py", n_beam),
                         ("headrace", sys.executable, "_headrace_worker.py", n_beam)]
            if beam_problem or n_full != n_beam:
                plan.append(("headrace", sys.executable, "_headrace_worker.py", n_full))
            for contender, py, worker, n in plan:
                print(f"running {contender:8s} {PIPELINE_LABELS[p]:18s} on {n:>9,} events ...",
                      end=" ", flush=True)
                r = run_worker(py, worker, files[n], p)
                r.update(contender=contender, pipeline=p, n=n)
                if "error" in r:
                    print("FAILED")
                    failures.append(f"{contender} {p} {n} events crashed:\n{r['error']}")
                else:
                    print(f"{r['seconds']:.2f}s, {r['events_per_s']:,.0f} events/s")
                    exp = expected[(p, n)]
                    r["ok"] = r["checksum"] == exp
                    if not r["ok"]:
                        failures.append(f"CHECKSUM MISMATCH: {contender} {p} {n} events got "
                                        f"{r['checksum']}, expected {exp}")
                results.append(r)
            same = [r for r in results if r["pipeline"] == p and r["n"] == n_beam and "error" not in r]
            if len(same) == 2 and same[0]["checksum"] != same[1]["checksum"]:
                failures.append(f"CHECKSUM MISMATCH between Beam and headrace on {p}, {n_beam} "
                                f"events: beam {same[0]['checksum']} vs headrace {same[1]['checksum']}")
    finally:
        if args.keep_data:
            print(f"input kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    beam_rate = {r["pipeline"]: r["events_per_s"] for r in results
                 if r["contender"] == "beam" and "error" not in r}
    rows = []
    for r in results:
        label = PIPELINE_LABELS[r["pipeline"]]
        if "error" in r:
            rows.append([label, r["contender"], f"{r['n']:,}", "CRASHED", "-", "-", "-", "-", "-"])
            continue
        br = beam_rate.get(r["pipeline"])
        ratio = f"{r['events_per_s'] / br:.1f}x" if br else "n/a"
        rows.append([label, r["contender"], f"{r['events']:,}", f"{r['seconds']:.2f}",
                     f"{r['events_per_s']:,.0f}", f"{r['peak_rss_mb']:.0f}", ratio,
                     f"{r['checksum']['windows']:,}", "ok" if r["ok"] else "MISMATCH"])
    print()
    print(fmt_table(rows, ["pipeline", "contender", "events", "seconds", "events/s",
                           "peak RSS MB", "ratio vs Beam", "windows", "checksum"],
                    right={2, 3, 4, 5, 6, 7}))
    print("\nseconds = pipeline construction + run (input loading and SDK import excluded); peak RSS "
          "= the worker process's ru_maxrss, input list included; ratio = events/s over Beam's "
          "events/s on the same pipeline.")

    print()
    for p in pipelines:
        br = beam_rate.get(p)
        if not br:
            print(f"{PIPELINE_LABELS[p]}: no Beam measurement, cannot compare to the 10x target.")
            continue
        hr = [r for r in results if r["pipeline"] == p and r["contender"] == "headrace"
              and "error" not in r]
        same = [r for r in hr if r["n"] == n_beam]
        full = [f"; full {r['events']:,}-event run: {r['events_per_s'] / br:.1f}x" for r in hr
                if r["n"] != n_beam]
        if same:
            ratio = same[0]["events_per_s"] / br
            verdict = "REACHES" if ratio >= TARGET else "MISSES"
            print(f"{PIPELINE_LABELS[p]}: headrace {verdict} the >= {TARGET:.0f}x target "
                  f"(same {n_beam:,}-event input: {ratio:.1f}x" + "".join(full) + ")")
        else:
            print(f"{PIPELINE_LABELS[p]}: headrace did not complete on the Beam subset")

    if failures:
        print("\n" + "\n\n".join(failures), file=sys.stderr)
        print(f"\nFAILED: {len(failures)} problem(s) above", file=sys.stderr)
        return 1
    print("\nall checksums agree with the plain-Python reference"
          + ("" if beam_problem else " and between Beam and headrace") + ".")
    return 0


if __name__ == "__main__":
    sys.exit(main())
