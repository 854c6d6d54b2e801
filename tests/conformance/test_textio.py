"""Text files: WriteToText / ReadFromText.

WriteToText writes shards named `prefix-SSSSS-of-NNNNN suffix` exactly once (no duplicates
after retries, no temporary files left behind); ReadFromText reads every line of every file
matching a glob, optionally skipping header lines. Expected contents come from plain Python
file reading and writing.
"""

from __future__ import annotations

import collections
import gzip
import os
import random
import re

import pytest

import headrace as beam
from headrace.errors import PipelineConstructionError
from headrace.testing.util import assert_that, equal_to
from tests._support import Once


def _all_files(root):
    return sorted(os.path.relpath(os.path.join(d, f), root)
                  for d, _, files in os.walk(root) for f in files)


def _all_entries(root):
    """Every file and directory under root (to spot temporary files and directories)."""
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, x), root) for x in dirs + files]
    return sorted(out)


def _check_shard_names(names, prefix, suffix, expected_n=None):
    pattern = re.compile(re.escape(prefix) + r"-(\d{5})-of-(\d{5})" + re.escape(suffix) + "$")
    matches = [pattern.match(n) for n in names]
    assert all(matches), f"unexpected file names {names}"
    counts = {int(m.group(2)) for m in matches}
    assert len(counts) == 1, f"shards disagree on the shard count: {names}"
    n = counts.pop()
    assert sorted(int(m.group(1)) for m in matches) == list(range(n)), names
    if expected_n is not None:
        assert n == expected_n
    return n


def _lines_of(paths):
    lines = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            lines += fh.read().splitlines()
    return lines


LINES = ["alpha", "beta gamma", "", "  leading and trailing  ", "ünïcödé ✓", "tab\tseparated",
         "delta"] + [f"line {i}" for i in range(40)]


def test_write_then_read_round_trip(make_pipeline, tmp_path):
    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=10) as p:
        p | beam.Create(LINES) | beam.WriteToText(str(out_dir / "part"), file_name_suffix=".txt")

    names = _all_entries(out_dir)
    _check_shard_names(names, "part", ".txt")
    assert collections.Counter(_lines_of(out_dir / n for n in names)) == collections.Counter(LINES)

    with make_pipeline() as p:
        back = p | beam.ReadFromText(str(out_dir / "part-*.txt"))
        assert_that(back, equal_to(LINES))


def test_write_outputs_the_final_file_names(make_pipeline, tmp_path):
    out_dir = tmp_path / "named"
    out_dir.mkdir()

    def names_are_the_files_on_disk(actual, out_dir=str(out_dir)):
        actual = sorted(os.path.basename(a) for a in actual)
        on_disk = sorted(os.listdir(out_dir))
        if not actual or actual != on_disk:
            raise AssertionError(f"WriteToText output {actual} != files on disk {on_disk}")

    with make_pipeline() as p:
        written = (p | beam.Create(["a", "b", "c"])
                   | beam.WriteToText(str(out_dir / "names"), file_name_suffix=".csv"))
        assert_that(written, names_are_the_files_on_disk)
    _check_shard_names(_all_entries(out_dir), "names", ".csv")


def test_num_shards_gives_exactly_that_many_files(make_pipeline, tmp_path):
    lines = [f"row-{i}" for i in range(30)]
    with make_pipeline() as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "out"), file_name_suffix=".txt",
                                                  num_shards=3)
    names = _all_entries(tmp_path)
    assert names == [f"out-0000{i}-of-00003.txt" for i in range(3)]
    assert collections.Counter(_lines_of(tmp_path / n for n in names)) == collections.Counter(lines)


def test_num_shards_with_fewer_elements_than_shards_still_gives_that_many_files(make_pipeline,
                                                                                tmp_path):
    with make_pipeline() as p:
        p | beam.Create(["only", "two"]) | beam.WriteToText(str(tmp_path / "out"),
                                                            file_name_suffix=".txt", num_shards=3)
    names = _all_entries(tmp_path)
    assert names == [f"out-0000{i}-of-00003.txt" for i in range(3)]
    assert sorted(_lines_of(tmp_path / n for n in names)) == ["only", "two"]


def test_write_of_empty_pcollection_writes_one_empty_shard(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create([]) | beam.WriteToText(str(tmp_path / "empty"))
    names = _all_entries(tmp_path)
    assert names == ["empty-00000-of-00001"]
    assert (tmp_path / names[0]).read_bytes() == b""


def test_write_header(make_pipeline, tmp_path):
    lines = ["1,2", "3,4", "5,6"]
    with make_pipeline() as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "t"), file_name_suffix=".csv",
                                                  header="a,b", num_shards=2)
    names = _all_entries(tmp_path)
    _check_shard_names(names, "t", ".csv", expected_n=2)
    data = []
    for n in names:
        file_lines = (tmp_path / n).read_text().splitlines()
        assert file_lines[0] == "a,b"
        data += file_lines[1:]
    assert sorted(data) == sorted(lines)


def test_write_with_retried_upstream_failure_has_no_duplicates(make_pipeline, tmp_path):
    once = Once(tmp_path / "markers")
    lines = [f"record {i}" for i in range(11)]

    def flaky(line, once=once):
        if line == "record 6" and once.first("fail"):
            raise RuntimeError("transient")
        return line

    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=2) as p:
        (p | beam.Create(lines) | "Flaky" >> beam.Map(flaky)
         | beam.WriteToText(str(out_dir / "res"), file_name_suffix=".txt"))
    assert not once.first("fail"), "the failure was never injected"
    names = _all_entries(out_dir)
    _check_shard_names(names, "res", ".txt")
    written = _lines_of(out_dir / n for n in names)
    assert collections.Counter(written) == collections.Counter(lines)


def test_sharded_write_with_retried_upstream_failure_has_no_duplicates(make_pipeline, tmp_path):
    once = Once(tmp_path / "markers")
    lines = [f"r{i}" for i in range(25)]

    def flaky(line, once=once):
        if line == "r13" and once.first("fail"):
            raise RuntimeError("transient")
        return line

    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=3) as p:
        (p | beam.Create(lines) | "Flaky" >> beam.Map(flaky)
         | beam.WriteToText(str(out_dir / "res"), num_shards=2))
    names = _all_entries(out_dir)
    assert names == ["res-00000-of-00002", "res-00001-of-00002"]
    assert collections.Counter(_lines_of(out_dir / n for n in names)) == collections.Counter(lines)


def test_gzip_round_trip(make_pipeline, tmp_path):
    lines = [f"compressed {i}" for i in range(20)]
    with make_pipeline() as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "z"), file_name_suffix=".gz")
    names = _all_entries(tmp_path)
    _check_shard_names(names, "z", ".gz")
    plain = []
    for n in names:
        with gzip.open(tmp_path / n, "rt", encoding="utf-8") as fh:
            plain += fh.read().splitlines()
    assert sorted(plain) == sorted(lines)
    with make_pipeline() as p:
        assert_that(p | beam.ReadFromText(str(tmp_path / "z-*.gz")), equal_to(lines))


# ---------------------------------------------------------------------------------------
# ReadFromText


@pytest.mark.parametrize("content", [
    "one\ntwo\nthree\n",
    "one\ntwo\nthree",
    "\n\nmiddle\n\n",
    "crlf one\r\ncrlf two\r\n",
    "",
    "single",
], ids=["trailing-newline", "no-trailing-newline", "blank-lines", "crlf", "empty", "single"])
def test_read_from_text_multi_line_file(make_pipeline, tmp_path, content):
    path = tmp_path / "input.txt"
    path.write_bytes(content.encode("utf-8"))
    with make_pipeline(bundle_size=2) as p:
        assert_that(p | beam.ReadFromText(str(path)), equal_to(content.splitlines()))


def test_read_from_text_glob_pattern(make_pipeline, tmp_path):
    expected = []
    for i in range(4):
        lines = [f"file{i}-line{j}" for j in range(i + 1)]
        (tmp_path / f"data-{i}.txt").write_text("\n".join(lines) + "\n")
        expected += lines
    (tmp_path / "other.csv").write_text("must,not,be,read\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data-9.txt").write_text("not matched either\n")
    with make_pipeline() as p:
        assert_that(p | beam.ReadFromText(str(tmp_path / "data-*.txt")), equal_to(expected))


def test_read_from_text_skip_header_lines_in_every_file(make_pipeline, tmp_path):
    expected = []
    for i in range(3):
        body = [f"{i},{j}" for j in range(3)]
        (tmp_path / f"t{i}.csv").write_text("\n".join(["h1,h2", "# comment"] + body) + "\n")
        expected += body
    with make_pipeline() as p:
        out = p | beam.ReadFromText(str(tmp_path / "*.csv"), skip_header_lines=2)
        assert_that(out, equal_to(expected))


def test_read_from_text_large_file_split_into_ranges(make_pipeline, tmp_path):
    # A few MB, so that the reader splits the file into byte ranges. The file is made of 4 KiB
    # blocks of whole lines, so a line starts exactly at every 4 KiB boundary (where range
    # splits typically fall): every line must still be read exactly once.
    rnd = random.Random(1234)
    block, n_blocks = 4096, 600
    lines = []
    for _ in range(n_blocks):
        left = block
        while left:
            length = min(left, rnd.randrange(1, 130))  # bytes including the newline
            lines.append("".join(rnd.choices("abcdefghij ,.", k=length - 1)))
            left -= length
    text = "\n".join(lines)  # no final newline: n_blocks * 4096 - 1 bytes
    path = tmp_path / "big.txt"
    path.write_text(text)
    assert path.stat().st_size == n_blocks * block - 1
    expected = text.splitlines()  # (a final empty "line" after the last newline is no line)
    with make_pipeline() as p:
        all_lines = p | beam.ReadFromText(str(path)) | beam.combiners.ToList() | beam.Map(sorted)
        assert_that(all_lines, equal_to([sorted(expected)]))


def test_read_from_text_missing_file_raises_at_construction(tmp_path):
    with pytest.raises(PipelineConstructionError):
        beam.ReadFromText(str(tmp_path / "missing.txt"))
    with pytest.raises(PipelineConstructionError):
        beam.ReadFromText(str(tmp_path / "nothing-*.txt"))


def _reference_lines(data: bytes, strip: bool, skip: int):
    """The records of a file as Python's binary readline gives them (a CR before the newline goes
    when stripping; a last line without a newline is kept as it is)."""
    out = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos)
        end = len(data) if nl < 0 else nl + 1
        raw = data[pos:end]
        if strip and raw.endswith(b"\n"):
            raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
        out.append(raw.decode("utf-8"))
        pos = end
    return out[skip:]


@pytest.mark.parametrize("strip", [True, False], ids=["strip", "keep-newlines"])
def test_read_from_text_byte_ranges_read_every_line_once(tmp_path, monkeypatch, strip):
    # Runner-free: the source's parts read in turn must give the file's lines, whatever the byte
    # ranges and the read buffer's size (shrunk here so lines straddle buffer boundaries).
    from hypothesis import given, settings, strategies as st

    import headrace.io.textio as textio

    monkeypatch.setattr(textio, "_CHUNK", 7)
    line = st.text(alphabet="ab\r é€", max_size=12)

    @settings(max_examples=300, deadline=None)
    @given(lines=st.lists(line, max_size=12), final_newline=st.booleans(),
           cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=5))
    def check(lines, final_newline, cuts):
        data = "\n".join(lines).encode("utf-8") + (b"\n" if final_newline and lines else b"")
        path = tmp_path / "f.txt"
        path.write_bytes(data)
        source = beam.io.ReadFromText(str(path), strip_trailing_newlines=strip)._source
        bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
        got = []
        for start, end in zip(bounds, bounds[1:]):
            got += list(source.read((str(path), start, end)))
        assert got == _reference_lines(data, strip, 0)
        whole = [x for batch in source.read_batches((str(path), 0, -1), 3) for x in batch]
        assert whole == _reference_lines(data, strip, 0)
        if lines:
            skipping = beam.io.ReadFromText(str(path), strip_trailing_newlines=strip, skip_header_lines=2)
            assert list(skipping._source.read((str(path), 0, -1))) == _reference_lines(data, strip, 2)

    check()
