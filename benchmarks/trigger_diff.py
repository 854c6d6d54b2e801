"""Differential check: the trigger transcript corpus on Apache Beam Python's trigger machinery.

    python benchmarks/trigger_diff.py [--beam-python PATH] [--mode driver|held|both] [-q]

Runs every transcript of tests/transcripts/*.yaml through Beam Python's own
GeneralTriggerDriver (in Beam's virtualenv, as a subprocess: benchmarks/_beam_trigger_worker.py),
compares Beam's panes with the transcript's expectations (which are headrace's semantics: the
trigger spec, and Beam Java where the spec is silent), and prints a table: transcript, the
Beam deviations it is tagged with (`beam_deviation:`, see docs/semantics.md), and per mode
same / different / n/a; then, for each difference, both pane lists of every step that differs.

Modes: ``driver`` passes the input watermark as the output watermark, as Beam's
TriggerDriverTranscriptTest does; ``held`` holds the output watermark back by the key's
watermark holds, as Beam's DirectRunner does (deviation 7 shows only there).

Exit status: 0 when every difference is explained by the transcript's `beam_deviation` tags,
1 when a difference is unexplained or Beam crashed, 2 when Beam is not available.
Not part of the test suite (Beam is not installed there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import BEAM_VENV_HINT, beam_usable, default_beam_python  # noqa: E402

REPO = os.path.dirname(HERE)
CORPUS_DIR = os.path.join(REPO, "tests", "transcripts")
sys.path.insert(0, CORPUS_DIR)

import _format  # noqa: E402


def run_beam(beam_python: str, mode: str) -> Dict[str, Dict[str, Any]]:
    """Beam's observations per transcript name, from the worker in Beam's virtualenv."""
    proc = subprocess.run(
        [beam_python, os.path.join(HERE, "_beam_trigger_worker.py"), CORPUS_DIR, mode],
        capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"the Beam worker failed:\n{proc.stderr}")
    return {r["name"]: r for r in json.loads(proc.stdout)}


def tags(spec: Dict[str, Any]) -> List[int]:
    """The Beam deviations a transcript is tagged with."""
    return _format.deviations(spec)


def compare(spec: Dict[str, Any], result: Dict[str, Any]) -> Dict[str, Any]:
    """same / different / n/a / error, with the differing steps (expected and Beam's panes)."""
    if result["status"] != "ran":
        return {"verdict": result["status"], "reason": result.get("reason", "")}
    observed = result["observed"]
    steps = []
    for (desc, want), obs in zip(_format.expected_steps(spec), observed):
        if not _format.same_panes(want, obs["panes"]):
            steps.append((desc, want, obs["panes"]))
    errors = _format.check(spec, observed)
    return {"verdict": "different" if errors else "same", "steps": steps}


def cell(c: Dict[str, Any], tagged: bool) -> str:
    v = c["verdict"]
    if v == "different":
        return "different" if tagged else "DIFFERENT (unexplained)"
    if v == "n/a":
        return f"n/a: {c['reason']}"
    if v == "error":
        return "ERROR"
    return "same"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beam-python", default=default_beam_python())
    ap.add_argument("--mode", choices=("driver", "held", "both"), default="both")
    ap.add_argument("-q", "--quiet", action="store_true", help="table and summary only")
    args = ap.parse_args()
    problem = beam_usable(args.beam_python)
    if problem:
        print(f"Apache Beam is not available: {problem}\nCreate it with: {BEAM_VENV_HINT}")
        return 2
    modes = ["driver", "held"] if args.mode == "both" else [args.mode]
    corpus = _format.load_corpus(CORPUS_DIR)
    beam = {m: run_beam(args.beam_python, m) for m in modes}
    rows = []
    for spec in corpus:
        rows.append((spec, {m: compare(spec, beam[m][spec["name"]]) for m in modes}))

    name_w = max(len(s["name"]) for s in corpus)
    header = f"{'transcript':<{name_w}}  {'deviation':<9}  " + "  ".join(f"{m:<22}" for m in modes)
    print(header)
    print("-" * len(header))
    for spec, cells in rows:
        t = tags(spec)
        dev = ",".join(map(str, t)) or "-"
        note = "  (headrace xfail)" if "xfail" in spec else ""
        print(f"{spec['name']:<{name_w}}  {dev:<9}  "
              + "  ".join(f"{cell(cells[m], bool(t)):<22}" for m in modes) + note)

    counts: Dict[str, int] = {}
    unexplained = 0
    for spec, cells in rows:
        for m in modes:
            c = cells[m]
            key = c["verdict"]
            if key == "different":
                key = "different (tagged)" if tags(spec) else "different (unexplained)"
                unexplained += not tags(spec)
            elif key == "same" and tags(spec) and m == modes[-1] \
                    and all(cells[x]["verdict"] == "same" for x in modes):
                print(f"note: {spec['name']} is tagged {tags(spec)} but Beam agrees in every mode")
            elif key == "error":
                unexplained += 1
            counts[f"{m}: {key}"] = counts.get(f"{m}: {key}", 0) + 1
    print()
    print(f"{len(corpus)} transcripts; " + "; ".join(f"{k} {v}" for k, v in sorted(counts.items())))

    if not args.quiet:
        for spec, cells in rows:
            for m in modes:
                c = cells[m]
                if c["verdict"] == "error":
                    print(f"\n== {spec['name']} [{m}]: Beam raised {c['reason']}")
                if c["verdict"] != "different":
                    continue
                print(f"\n== {spec['name']} [{m}] (deviation {','.join(map(str, tags(spec))) or '?'})")
                for desc, want, got in c["steps"]:
                    print(f"  {desc}")
                    print("    transcript: " + ("\n                ".join(
                        _format.format_pane(p) for p in want) or "(no pane)"))
                    print("    beam:       " + ("\n                ".join(
                        _format.format_pane(p) for p in got) or "(no pane)"))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
