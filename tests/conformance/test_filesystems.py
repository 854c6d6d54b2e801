"""Beam's `FileSystems` on local paths and `file://` URLs: match (with Beam's `*` / `**`
patterns and limits), open and create (compression by name and by suffix), copy, rename,
delete, exists, join, split, mkdirs, and the errors (an unknown scheme, a missing file, a
batch operation that partly fails). Expected results come from `os` and the compression
modules of the standard library. The last tests use FileSystems inside a pipeline's steps,
on every runner.
"""

from __future__ import annotations

import bz2
import gzip
import lzma
import os
import zlib

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, MatchResult
from headrace.io.filesystems import FileSystems
from headrace.testing.util import assert_that, equal_to


def _tree(root):
    """root/a.txt, root/b.csv, root/sub/c.txt, root/sub/deeper/d.txt; returns their paths."""
    paths = [root / "a.txt", root / "b.csv", root / "sub" / "c.txt", root / "sub" / "deeper" / "d.txt"]
    for i, p in enumerate(paths):
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"x" * (i + 1))
    return [str(p) for p in paths]


def test_match_single_star_stays_in_a_directory_double_star_descends(tmp_path):
    a, b, c, d = _tree(tmp_path)
    star, double, exact, missing, under = FileSystems.match(
        [str(tmp_path / "*.txt"), str(tmp_path / "**.txt"), a, str(tmp_path / "nope-*"),
         str(tmp_path / "sub") + "/"])
    assert isinstance(star, MatchResult) and star.pattern == str(tmp_path / "*.txt")
    assert [m.path for m in star.metadata_list] == [a]
    assert [m.path for m in double.metadata_list] == sorted([a, c, d])
    assert [m.path for m in exact.metadata_list] == [a]
    assert missing.metadata_list == []
    assert [m.path for m in under.metadata_list] == [c]  # a trailing '/' means '/*'
    assert b not in [m.path for m in double.metadata_list]


def test_match_metadata_and_limits(tmp_path):
    paths = _tree(tmp_path)
    (result,) = FileSystems.match([str(tmp_path / "**")], limits=[2])
    assert len(result.metadata_list) == 2
    for m in result.metadata_list:
        st = os.stat(m.path)
        assert m == FileMetadata(m.path, st.st_size, st.st_mtime)
        assert m.size_in_bytes == paths.index(m.path) + 1
        assert m.last_updated_in_seconds == pytest.approx(st.st_mtime)
    with pytest.raises(InvalidArgumentError, match="2 patterns but 1 limits"):
        FileSystems.match(["a", "b"], limits=[1])
    assert FileSystems.match([]) == []


def test_file_urls_work_and_keep_their_form(tmp_path):
    a, _, c, _ = _tree(tmp_path)
    url = "file://" + str(tmp_path / "sub" / "*.txt")
    (result,) = FileSystems.match([url])
    assert [m.path for m in result.metadata_list] == ["file://" + c]
    with FileSystems.open(result.metadata_list[0].path) as fh:
        assert fh.read() == b"xxx"
    assert FileSystems.exists("file://" + a) and not FileSystems.exists("file://" + a + ".no")
    assert FileSystems.get_scheme("file:///x") == "file" and FileSystems.get_scheme("/x") is None


@pytest.mark.parametrize("kind, suffix, decompress", [
    ("gzip", ".gz", gzip.decompress), ("bzip2", ".bz2", bz2.decompress),
    ("lzma", ".xz", lzma.decompress), ("deflate", ".deflate", zlib.decompress),
    ("uncompressed", ".txt", lambda b: b)])
def test_create_and_open_compress_by_suffix_and_by_name(tmp_path, kind, suffix, decompress):
    data = b"".join(b"line %d\n" % i for i in range(5000))
    path = str(tmp_path / "out" / f"data{suffix}")  # the parent directory is created
    with FileSystems.create(path) as fh:
        fh.write(data)
    with open(path, "rb") as raw:
        assert decompress(raw.read()) == data
    with FileSystems.open(path) as fh:
        assert fh.read() == data
    named = str(tmp_path / "named.bin")
    with FileSystems.create(named, compression_type=kind) as fh:
        fh.write(data)
    with FileSystems.open(named, compression_type=kind) as fh:
        assert fh.readline() == b"line 0\n"
        fh.seek(7 * 100 + 90)  # forward, and back below
        fh.seek(7)
        assert fh.read(7) == b"line 1\n"
    assert CompressionTypes.mime_type(kind) == {
        "gzip": "application/x-gzip", "bzip2": "application/x-bz2", "lzma": "application/lzma",
        "deflate": "application/x-deflate"}.get(kind, "application/octet-stream")


def test_open_uncompressed_reads_the_raw_bytes(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(b"hello"))
    with FileSystems.open(str(path), compression_type=CompressionTypes.UNCOMPRESSED) as fh:
        assert fh.read() == path.read_bytes()


def test_copy_rename_delete(tmp_path):
    a, b, c, d = _tree(tmp_path)
    FileSystems.copy([a, str(tmp_path / "sub")], [str(tmp_path / "a2.txt"), str(tmp_path / "sub2")])
    assert (tmp_path / "a2.txt").read_bytes() == b"x"
    assert (tmp_path / "sub2" / "deeper" / "d.txt").read_bytes() == b"xxxx"
    FileSystems.rename([str(tmp_path / "a2.txt")], [str(tmp_path / "a3.txt")])
    assert not (tmp_path / "a2.txt").exists() and (tmp_path / "a3.txt").read_bytes() == b"x"
    FileSystems.delete([str(tmp_path / "sub2"), str(tmp_path / "*.csv")])
    assert not (tmp_path / "sub2").exists() and not os.path.exists(b)
    assert os.path.exists(a) and os.path.exists(d)


def test_batch_operations_report_each_failure(tmp_path):
    a, *_ = _tree(tmp_path)
    missing = str(tmp_path / "missing.txt")
    with pytest.raises(BeamIOError) as info:
        FileSystems.delete([missing, a])
    assert set(info.value.exception_details) == {missing}
    assert "No files found to delete" in str(info.value) and not os.path.exists(a)
    with pytest.raises(BeamIOError) as info:
        FileSystems.rename([missing], [str(tmp_path / "z")])
    assert list(info.value.exception_details) == [(missing, str(tmp_path / "z"))]
    with pytest.raises(BeamIOError, match="instead of list"):
        FileSystems.delete(missing)
    with pytest.raises(InvalidArgumentError, match="one destination per source"):
        FileSystems.copy([missing, missing], [missing])


def test_missing_file_and_unknown_scheme_errors_say_how_to_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"missing\.txt.*check the path.*FileSystems\.match"):
        FileSystems.open(str(tmp_path / "missing.txt"))
    for path in ("gs://bucket/x.txt", "s3://b/k", "hdfs://nn/p"):
        scheme = path.split(":")[0]
        with pytest.raises(ValueError, match=f"scheme '{scheme}'.*local paths and file:// URLs"):
            FileSystems.open(path)
    with pytest.raises(ValueError, match="scheme 'gs'"):
        FileSystems.copy([str(tmp_path / "a")], ["gs://bucket/a"])  # every path is checked
    with pytest.raises(InvalidArgumentError, match="compression_type"):
        FileSystems.create(str(tmp_path / "c"), compression_type="snappy")


def test_join_split_mkdirs_exists_last_updated_checksum(tmp_path):
    assert FileSystems.join(str(tmp_path), "a", "b.txt") == os.path.join(str(tmp_path), "a", "b.txt")
    assert FileSystems.split(str(tmp_path / "a" / "b.txt")) == (str(tmp_path / "a"), "b.txt")
    target = str(tmp_path / "m" / "n")
    FileSystems.mkdirs(target)
    assert os.path.isdir(target) and FileSystems.exists(target)
    with pytest.raises(IOError):
        FileSystems.mkdirs(target)
    (tmp_path / "f").write_bytes(b"12345")
    assert FileSystems.checksum(str(tmp_path / "f")) == "5"
    assert FileSystems.last_updated(str(tmp_path / "f")) == pytest.approx(os.path.getmtime(tmp_path / "f"))
    with pytest.raises(BeamIOError, match="does not exist"):
        FileSystems.last_updated(str(tmp_path / "nothing"))
    assert FileSystems.get_chunk_size(str(tmp_path)) == 1


def _write_with_filesystems(item):
    path, n = item
    with FileSystems.create(path) as fh:
        fh.write(b"".join(b"%d\n" % i for i in range(n)))
    (result,) = FileSystems.match([path])
    return result.metadata_list[0].size_in_bytes


def test_filesystems_in_pipeline_steps(make_pipeline, tmp_path):
    items = [(str(tmp_path / f"w{i}.txt.gz"), 10 + i) for i in range(3)]
    with make_pipeline() as p:
        sizes = p | beam.Create(items) | beam.Map(_write_with_filesystems)
        assert_that(sizes | beam.Map(lambda s: s > 0), equal_to([True] * 3))
    with make_pipeline() as p:
        lines = p | beam.ReadFromText(str(tmp_path / "w*.txt.gz"))
        assert_that(lines, equal_to([str(i) for _, n in items for i in range(n)]))


def test_connectors_take_file_urls_and_refuse_other_schemes(make_pipeline, tmp_path):
    url = "file://" + str(tmp_path / "out")
    with make_pipeline() as p:
        p | beam.Create(["u", "v"]) | beam.WriteToText(url, num_shards=1, file_name_suffix=".txt")
        p | "Json" >> beam.Create([{"a": 1}]) | beam.io.WriteToJson(url + "-json", num_shards=1)
    assert sorted((tmp_path / "out-00000-of-00001.txt").read_text().splitlines()) == ["u", "v"]
    assert (tmp_path / "out-json-00000-of-00001.json").read_text() == '{"a": 1}\n'
    for make in (lambda: beam.WriteToText("gs://bucket/out"),
                 lambda: beam.io.WriteToJson("s3://bucket/out"),
                 lambda: beam.io.ReadFromParquet("hdfs://nn/data-*.parquet")):
        with pytest.raises(ValueError, match="no file system for the scheme"):
            make()
