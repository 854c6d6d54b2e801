"""Beam-compatibility check: Beam-style programs run on Apache Beam and on headrace, outputs diffed.

    python benchmarks/beam_compat.py [--beam-python PATH] [--only NAME,...] [--runners local,spark]
                                     [--lines 25000] [--keep]

Each program is written once and imports its SDK's names from one place, so the only thing
that differs between the runs is the SDK:
* Beam's minimal and windowed word count (benchmarks/_wordcount_pipelines.py) over generated
  text;
* every module of benchmarks/compat/ (see benchmarks/compat/_run.py): stateful DoFns with
  state and timers, GroupIntoBatches, Deduplicate, coders, type hints, transforms.util,
  combiners, DoFn parameters, text IO and file systems, Beam's module paths.
Each runs once on Apache Beam's DirectRunner (in the Beam virtualenv) and on headrace's local
runner and Spark runner (local[2]) (a program may name the ones it runs on: RUNNERS =
("local",)); the sorted output lines of each headrace run are compared with Beam's. Prints a
line per program and runner, "identical" or the differences; exits 1 if any output differs or a
run fails, 2 if Beam is not available.
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
COMPAT = os.path.join(HERE, "compat")
sys.path.insert(0, HERE)

from _bench_env import BEAM_VENV_HINT, default_beam_python, headrace_revision  # noqa: E402

WORDCOUNT = ("minimal", "windowed")
RUNNERS = {  # headrace's runs: name -> pipeline arguments
    "local": ["--runner=DirectRunner"],
    "spark": ["--runner=SparkRunner", "--spark_master=local[2]"],
}

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


def compat_programs() -> List[str]:
    """The programs of benchmarks/compat/: its modules whose names do not start with '_'."""
    return sorted(f[:-3] for f in os.listdir(COMPAT) if f.endswith(".py") and not f.startswith("_"))


def _read_lines(files: List[str]) -> List[str]:
    lines: List[str] = []
    for f in files:
        with open(f, encoding="utf-8", newline="") as fh:
            lines.extend(fh.read().splitlines())
    return sorted(lines)


def run_one(python: str, sdk: str, program: str, inputs: Dict[str, str], out_dir: str,
            extra: List[str]) -> Dict[str, object]:
    """Runs one program with one SDK in a subprocess: its sorted output lines, or its error."""
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, WORDCOUNT_SDK=sdk, COMPAT_SDK=sdk)
    if program in WORDCOUNT:
        prefix = os.path.join(out_dir, "counts")
        cmd = [python, os.path.join(HERE, "_wordcount_pipelines.py"), program,
               "--input", inputs[program], "--output", prefix]
    else:
        prefix = os.path.join(out_dir, "out.txt")
        cmd = [python, os.path.join(COMPAT, "_run.py"), program,
               "--inputs", inputs["compat"], "--output", prefix]
    cmd += extra
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL)
    secs = time.perf_counter() - t0
    if r.returncode != 0:
        tail = "\n".join(r.stderr.strip().splitlines()[-30:])
        return {"error": f"COMPAT_SDK={sdk} {' '.join(cmd)}\nexit status {r.returncode}\n{tail}"}
    files = sorted(f for f in glob.glob(prefix + "*") if os.path.isfile(f))
    return {"lines": _read_lines(files), "seconds": secs}


def make_compat_inputs(d: str, programs: List[str]) -> None:
    """Calls each program's make_inputs(d) (plain Python), once, before any SDK runs."""
    sys.path.insert(0, COMPAT)
    os.environ.setdefault("COMPAT_SDK", "headrace")  # importing a program imports an SDK
    import importlib
    for name in programs:
        module = importlib.import_module(name)
        if hasattr(module, "make_inputs"):
            module.make_inputs(d)


def program_runners(program: str, runners: List[str]) -> List[str]:
    """The runners of `runners` a program is compared on: all, or those its RUNNERS names
    (e.g. a program whose transforms the Spark runners do not run yet)."""
    if program in WORDCOUNT:
        return runners
    import importlib
    only = getattr(importlib.import_module(program), "RUNNERS", None)
    return runners if only is None else [r for r in runners if r in only]


def compare(program: str, runner: str, b: Dict[str, object], h: Dict[str, object]) -> bool:
    """Prints whether headrace's run gave Beam's lines; True if it did."""
    blines, hlines = b["lines"], h["lines"]
    assert isinstance(blines, list) and isinstance(hlines, list)
    head = f"{program:28s} {runner:6s}"
    if blines == hlines:
        print(f"{head} identical ({len(blines):,} lines; beam {b['seconds']:.1f}s, "
              f"headrace {h['seconds']:.1f}s)")
        return True
    only_b = len(set(blines) - set(hlines))
    only_h = len(set(hlines) - set(blines))
    print(f"{head} DIFFERENT (beam {len(blines):,} lines, headrace {len(hlines):,}; "
          f"{only_b} only in beam, {only_h} only in headrace)")
    diff = list(difflib.unified_diff(blines, hlines, "beam (sorted)", "headrace (sorted)",
                                     lineterm="", n=0))
    for ln in diff[:60]:
        print("    " + ln)
    if len(diff) > 60:
        print(f"    ... {len(diff) - 60} more diff lines")
    return False


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the programs on Beam and on headrace's runners and prints the comparison."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beam-python", default=default_beam_python())
    ap.add_argument("--only", default="",
                    help="comma-separated program names (default: all; --list shows them)")
    ap.add_argument("--list", action="store_true", help="list the programs and exit")
    ap.add_argument("--runners", default="local,spark",
                    help="headrace runners to compare with Beam: local, spark or both")
    ap.add_argument("--lines", type=int, default=25_000,
                    help="lines of the word counts' plain input (the timestamped one has a fifth)")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--keep", action="store_true", help="keep inputs and outputs")
    args = ap.parse_args(argv)
    programs = list(WORDCOUNT) + compat_programs()
    if args.list:
        print("\n".join(programs))
        return 0
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in programs]
        if unknown:
            ap.error(f"unknown program(s) {unknown}; known: {', '.join(programs)}")
        programs = wanted
    runners = [r.strip() for r in args.runners.split(",") if r.strip()]
    for r in runners:
        if r not in RUNNERS:
            ap.error(f"unknown runner {r!r}; choose from {', '.join(RUNNERS)}")
    if not os.path.exists(args.beam_python):
        print(f"Apache Beam python {args.beam_python} not found; nothing to compare against.\n"
              f"Create it with:  {BEAM_VENV_HINT}  and pass --beam-python .venv-beam/bin/python")
        return 2

    print(f"headrace revision: {headrace_revision()}")
    tmp = tempfile.mkdtemp(prefix="beam-compat-")
    failed: List[str] = []
    try:
        inputs = generate_inputs(tmp, args.lines, args.seed)
        inputs["compat"] = os.path.join(tmp, "compat-inputs")
        os.makedirs(inputs["compat"])
        make_compat_inputs(inputs["compat"], [p for p in programs if p not in WORDCOUNT])
        print(f"inputs in {tmp}")
        for p in programs:
            b = run_one(args.beam_python, "beam", p, inputs, os.path.join(tmp, "beam", p), [])
            if "error" in b:
                failed.append(p)
                print(f"{p:28s} beam   FAILED to run\n{b['error']}")
                continue
            for r in runners:
                if r not in program_runners(p, runners):
                    print(f"{p:28s} {r:6s} skipped (the program sets RUNNERS = "
                          f"{program_runners(p, list(RUNNERS))})")
                    continue
                h = run_one(sys.executable, "headrace", p, inputs,
                            os.path.join(tmp, "headrace-" + r, p), RUNNERS[r])
                if "error" in h:
                    failed.append(f"{p} ({r})")
                    print(f"{p:28s} {r:6s} FAILED to run\n{h['error']}")
                elif not compare(p, r, b, h):
                    failed.append(f"{p} ({r})")
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    total = sum(len(program_runners(p, runners)) for p in programs)
    if failed:
        print(f"RESULT: {len(failed)} of {total} runs differ or failed: {', '.join(failed)}")
        return 1
    print(f"RESULT: identical ({total} runs: {len(programs)} programs x {len(runners)} headrace "
          "runner(s), less those a program skips)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
