"""Apache Beam's example pipelines run on headrace with only the imports swapped.

`benchmarks/_wordcount_pipelines.py` holds Beam's wordcount_minimal.py and
windowed_wordcount.py, written as Beam writes them; only its import block chooses the SDK
(WORDCOUNT_SDK=beam or headrace). `benchmarks/beam_compat.py` runs that same file under
Apache Beam and compares; here it runs under headrace, on the runner under test, and its
output files are checked against the same computation done in plain Python.
"""

from __future__ import annotations

import collections
import datetime
import glob
import importlib.util
import pathlib
import random
import re

import pytest

PIPELINES = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "_wordcount_pipelines.py"

VOCABULARY = ["king", "lear", "cordelia", "o'er", "don't", "the", "The", "and", "of", "fool",
              "Goneril", "Regan", "nothing", "will", "come"]


@pytest.fixture(scope="module")
def examples():
    """Beam's example module, imported with WORDCOUNT_SDK=headrace."""
    mp = pytest.MonkeyPatch()
    mp.setenv("WORDCOUNT_SDK", "headrace")
    try:
        spec = importlib.util.spec_from_file_location("headrace_beam_examples", PIPELINES)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        mp.undo()
    assert module.beam.__name__ == "headrace"
    return module


def _generate_text(rnd, n_lines):
    lines = []
    for _ in range(n_lines):
        words = [rnd.choice(VOCABULARY) for _ in range(rnd.randrange(0, 14))]
        seps = [rnd.choice([" ", ", ", "; ", " -- ", "! ", "? 12 ", ".  "]) for _ in words]
        lines.append("".join(w + s for w, s in zip(words, seps)).strip())
    return lines


def _output_lines(prefix):
    files = sorted(glob.glob(f"{prefix}-*-of-*"))
    assert files, f"the pipeline wrote no output files at {prefix}"
    return [line for path in files for line in pathlib.Path(path).read_text().splitlines()]


def test_wordcount_minimal(examples, runner_flags, tmp_path):
    lines = _generate_text(random.Random(20150831), 2500)
    input_path = tmp_path / "kinglear.txt"
    input_path.write_text("\n".join(lines) + "\n")
    prefix = tmp_path / "out" / "counts"

    examples.run_minimal([f"--input={input_path}", f"--output={prefix}", *runner_flags])

    actual = collections.Counter()
    for line in _output_lines(prefix):
        word, count = line.rsplit(": ", 1)
        assert word not in actual, f"word {word!r} written twice"
        actual[word] = int(count)
    assert actual == collections.Counter(
        w for line in lines for w in re.findall(r"[A-Za-z']+", line))


def test_windowed_wordcount(examples, runner_flags, tmp_path):
    rnd = random.Random(7)
    base = 1_700_000_000  # 2023-11-14T22:13:20Z, not aligned to two minutes
    timed_lines = [(line, base + rnd.randrange(0, 15 * 60)) for line in _generate_text(rnd, 300)]
    input_path = tmp_path / "lines.tsv"
    input_path.write_text("".join(f"{t}\t{line}\n" for line, t in timed_lines))
    prefix = tmp_path / "out" / "counts"

    examples.run_windowed([f"--input={input_path}", f"--output={prefix}", *runner_flags,
                           "--bundle_size=50"])

    expected = collections.Counter()
    for line, t in timed_lines:
        for w in re.findall(r"[A-Za-z']+", line):
            expected[(w, t - t % 120)] += 1
    fmt = '%Y-%m-%d %H:%M:%S.%f UTC'

    def utc(seconds):
        return datetime.datetime.fromtimestamp(seconds, tz=datetime.timezone.utc).strftime(fmt)

    want = sorted(f"{utc(s)}\t{utc(s + 120)}\t{w}\t{c}" for (w, s), c in expected.items())
    assert sorted(_output_lines(prefix)) == want
