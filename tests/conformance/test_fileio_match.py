"""Beam's `io.fileio`: MatchFiles, MatchAll, ReadMatches, and MatchContinuously (a splittable
DoFn watching a pattern), on every runner. Expected files are the ones the tests write."""

from __future__ import annotations

import os

import pytest

import headrace as beam
from headrace.errors import HeadraceError
from headrace.io.fileio import (
    EmptyMatchTreatment, MatchAll, MatchContinuously, MatchFiles, ReadMatches,
)
from headrace.testing.util import assert_that, equal_to


def _write(directory, names):
    for name in names:
        with open(os.path.join(directory, name), "w") as fh:
            fh.write(f"content of {name}\n")


def test_match_files_and_read_matches(make_pipeline, tmp_path):
    _write(tmp_path, ["a.txt", "b.txt", "c.log"])
    with make_pipeline() as p:
        out = (p | MatchFiles(str(tmp_path / "*.txt")) | ReadMatches()
               | beam.Map(lambda f: (os.path.basename(f.metadata.path), f.read_utf8())))
        assert_that(out, equal_to([(n, f"content of {n}\n") for n in ("a.txt", "b.txt")]))


def test_match_all_reads_patterns_from_a_pcollection(make_pipeline, tmp_path):
    _write(tmp_path, ["a.txt", "b.txt", "c.log"])
    patterns = [str(tmp_path / "*.txt"), str(tmp_path / "*.log"), str(tmp_path / "*.csv")]
    with make_pipeline() as p:
        out = (p | beam.Create(patterns) | MatchAll()
               | beam.Map(lambda m: (os.path.basename(m.path), m.size_in_bytes)))
        assert_that(out, equal_to([(n, len(f"content of {n}\n")) for n in ("a.txt", "b.txt", "c.log")]))


def test_an_empty_match_without_a_wildcard_fails(make_pipeline, tmp_path):
    with pytest.raises(HeadraceError, match="no file matches"):
        with make_pipeline(max_bundle_attempts=1) as p:
            _ = p | MatchFiles(str(tmp_path / "missing.txt"))
    assert EmptyMatchTreatment.allow_empty_match("x*", EmptyMatchTreatment.ALLOW_IF_WILDCARD)


class WriteNext(beam.DoFn):
    """For each file f<i>.txt it sees (i < last - 3), writes f<i+3>.txt: files keep appearing
    while the watch runs, until f<last-1>.txt."""

    def __init__(self, directory, last):
        self.directory = directory
        self.last = last

    def process(self, meta):
        name = os.path.basename(meta.path)
        i = int(name[1:-4])
        nxt = os.path.join(self.directory, f"f{i + 3}.txt")
        if i + 3 < self.last and not os.path.exists(nxt):
            with open(nxt + ".tmp", "w") as fh:
                fh.write(f"file {i + 3}\n")
            os.replace(nxt + ".tmp", nxt)  # appears whole
        yield name


def test_match_continuously_outputs_each_new_file_once_and_stops_when_idle(make_pipeline, tmp_path):
    last = 9
    _write(tmp_path, [f"f{i}.txt" for i in range(3)])
    with make_pipeline() as p:
        out = (p | MatchContinuously(str(tmp_path / "*.txt"), interval=0.05, stop_after_idle=1.5)
               | beam.ParDo(WriteNext(str(tmp_path), last)))
        assert out.is_bounded is False
        assert_that(out, equal_to([f"f{i}.txt" for i in range(last)]))
