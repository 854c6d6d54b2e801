"""Beam-compatibility check: Beam's word count examples run on Apache Beam and on headrace.

    python benchmarks/beam_compat.py [--beam-python PATH] [--lines 25000] [--keep]

Runs the minimal word count and the windowed word count (benchmarks/_wordcount_pipelines.py,
one source whose only SDK-specific lines are its imports) once with Apache Beam's
DirectRunner (in the Beam virtualenv, `import apache_beam as beam`) and once with headrace
(`import headrace as beam`), over generated input text, then diffs the sorted output lines.
Prints "identical" per pipeline, or the differences; exits 1 if any output differs or a run
fails, 2 if Beam is not available.
"""

from __future__ import annotations

import argparse
import difflib
import glob
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _bench_env import BEAM_VENV_HINT, default_beam_python, headrace_revision  # noqa: E402

PIPELINES = ("minimal", "windowed")

_WORDS = (
    "the quick brown fox jumps over lazy dog and a river runs through it while we wait "
    "for tomorrow Beam beam BEAM Dataflow window watermark trigger pane session key value "
    "don't can't o'clock rock'n'roll 'quoted' it's isn't they're y'all ' '' "
    "naïve café résumé Straße Ünïcödé co-operate e-mail state-of-the-art "
    "x2 3d 42 1,000 3.14 foo_bar foo.bar user@example.com http://example.org/a?b=c "
    "King Lear KING lear Hamlet HAMLET to be or not"
).split()
_SEPS = [" ", " ", " ", "  ", ", ", ". ", "; ", " -- ", "! ", "? ", ": ", "\t", " (", ") "]


_SYLLABLES = "ka lo mi ne ru ta shi ven dor ax ily qu'e ch st ph".split()


def _pseudo_words(rng: random.Random, n: int) -> List[str]:
    """n made-up words (some capitalised, some with apostrophes) for a long tail of keys."""
    words = []
    for _ in range(n):
        w = "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4)))
        words.append(w.capitalize() if rng.random() < 0.2 else w)
    return words


def _line(rng: random.Random, tail: List[str]) -> str:
    n = rng.choice([0, 1, 3, 5, 8, 8, 10, 12, 15, 20])
    out = []
    for _ in range(n):
        out.append(rng.choice(_WORDS) if rng.random() < 0.7 else rng.choice(tail))
        out.append(rng.choice(_SEPS))
    return "".join(out).rstrip(" ") if rng.random() < 0.9 else "".join(out)


def generate_inputs(d: str, lines: int, seed: int) -> Dict[str, str]:
    """A plain text file (minimal) and a '<epoch seconds>\\t<text>' file (windowed)."""
    rng = random.Random(seed)
    tail = _pseudo_words(rng, 5000)
    plain = os.path.join(d, "input.txt")
    with open(plain, "w", encoding="utf-8", newline="") as fh:
        for i in range(lines):
            end = "\r\n" if rng.random() < 0.05 else "\n"
            fh.write(_line(rng, tail) + (end if i < lines - 1 else ""))  # no newline at the very end
    stamped = os.path.join(d, "input.tsv")
    base = 1_700_000_040  # a multiple of 120 s: window boundaries are base + k * 120
    n_stamped = max(1, lines // 5)
    with open(stamped, "w", encoding="utf-8", newline="") as fh:
        for i in range(n_stamped):
            r = rng.random()
            if r < 0.05:    # exactly on a window boundary
                ts = f"{base + 120 * rng.randrange(60)}"
            elif r < 0.10:  # one millisecond before a boundary
                ts = f"{base + 120 * rng.randrange(1, 60) - 0.001:.3f}"
            else:           # anywhere in two hours, millisecond resolution
                ts = f"{base + rng.randrange(2 * 3600 * 1000) / 1000:.3f}"
            fh.write(f"{ts}\t{_line(rng, tail)}\n")
    return {"minimal": plain, "windowed": stamped}


def run_one(python: str, sdk: str, pipeline: str, inp: str, out_dir: str) -> Dict[str, object]:
    os.makedirs(out_dir, exist_ok=True)
    prefix = os.path.join(out_dir, "counts")
    env = dict(os.environ, WORDCOUNT_SDK=sdk)
    cmd = [python, os.path.join(HERE, "_wordcount_pipelines.py"), pipeline,
           "--input", inp, "--output", prefix]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-30:])
        return {"error": f"WORDCOUNT_SDK={sdk} {' '.join(cmd)}\nexit status {r.returncode}\n{tail}"}
    shards = sorted(f for f in glob.glob(prefix + "*") if os.path.isfile(f))
    lines: List[str] = []
    for f in shards:
        with open(f, encoding="utf-8", newline="") as fh:
            lines.extend(fh.read().splitlines())
    return {"lines": sorted(lines), "shards": len(shards), "seconds": secs}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beam-python",
                    default=default_beam_python())
    ap.add_argument("--lines", type=int, default=25_000,
                    help="lines of the plain input (the timestamped input has a fifth of that)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep inputs and outputs")
    args = ap.parse_args(argv)
    if not os.path.exists(args.beam_python):
        print(f"Apache Beam python {args.beam_python} not found; nothing to compare against.\n"
              f"Create it with:  {BEAM_VENV_HINT}  and pass --beam-python .venv-beam/bin/python")
        return 2

    print(f"headrace revision: {headrace_revision()}")
    tmp = tempfile.mkdtemp(prefix="beam-compat-")
    status = 0
    try:
        inputs = generate_inputs(tmp, args.lines, args.seed)
        sizes = ", ".join(f"{p}: {os.path.getsize(f):,} bytes" for p, f in inputs.items())
        print(f"inputs in {tmp} ({sizes})")
        for p in PIPELINES:
            res = {}
            for sdk, py in (("beam", args.beam_python), ("headrace", sys.executable)):
                res[sdk] = run_one(py, sdk, p, inputs[p], os.path.join(tmp, sdk, p))
            b, h = res["beam"], res["headrace"]
            errors = [r["error"] for r in (b, h) if "error" in r]
            if errors:
                status = 1
                print(f"{p}: FAILED to run\n" + "\n\n".join(str(e) for e in errors))
                continue
            info = (f"{len(b['lines']):,} lines; beam {b['seconds']:.1f}s in {b['shards']} shard(s), "
                    f"headrace {h['seconds']:.1f}s in {h['shards']} shard(s)")
            if b["lines"] == h["lines"]:
                print(f"{p}: identical ({info})")
                continue
            status = 1
            only_b = len(set(b["lines"]) - set(h["lines"]))
            only_h = len(set(h["lines"]) - set(b["lines"]))
            print(f"{p}: DIFFERENT (beam {len(b['lines']):,} lines, headrace {len(h['lines']):,}; "
                  f"{only_b} only in beam, {only_h} only in headrace)")
            diff = list(difflib.unified_diff(b["lines"], h["lines"], "beam (sorted)",
                                             "headrace (sorted)", lineterm="", n=0))
            for ln in diff[:60]:
                print("    " + ln)
            if len(diff) > 60:
                print(f"    ... {len(diff) - 60} more diff lines")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    print("RESULT: " + ("identical" if status == 0 else "DIFFERENCES or failures (see above)"))
    return status


if __name__ == "__main__":
    sys.exit(main())
