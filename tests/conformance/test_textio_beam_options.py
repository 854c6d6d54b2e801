"""Beam's text reading options on every runner: `delimiter`, `escapechar`, `skip_header_lines`
and `compression_type` on ReadFromText, ReadFromTextWithFilename, ReadAllFromText and
ReadFromJson, including files larger than one split (records, escapes and delimiters across
split boundaries).

Expected records come from `reference_records`, a byte-by-byte reading of Beam's definition: a
record ends at the delimiter (default '\\n', '\\r\\n' too) unless an odd number of escape bytes
precede it; escape bytes stay in the record; a last record without a delimiter is kept.
"""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os
import random
import zlib

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineExecutionError, UnsupportedArgumentError
from headrace.io import ReadAllFromText, ReadFromJson, ReadFromTextWithFilename
from headrace.io.filesystem import CompressionTypes
from headrace.testing.util import assert_that, equal_to


def _escaped(data: bytes, i: int, esc) -> bool:
    n = 0
    while esc is not None and i - 1 - n >= 0 and data[i - 1 - n] == esc[0]:
        n += 1
    return n % 2 == 1


def reference_records(data: bytes, delimiter=None, escapechar=None, strip=True, skip=0):
    """The records of `data` by Beam's definition (see the module doc), as bytes."""
    delim = delimiter or b"\n"
    out, start, i = [], 0, 0
    while i < len(data):
        if data.startswith(delim, i) and not _escaped(data, i, escapechar):
            if not strip:
                out.append(data[start:i + len(delim)])
            elif (delimiter is None and i > start and data[i - 1:i] == b"\r"
                  and not _escaped(data, i - 1, escapechar)):
                out.append(data[start:i - 1])
            else:
                out.append(data[start:i])
            i += len(delim)
            start = i
        else:
            i += 1
    if start < len(data):
        out.append(data[start:])
    return out[skip:]


def _decoded(records):
    return [r.decode("utf-8") for r in records]


def _big_escaped_file(path, delimiter, escapechar, n_bytes, seed):
    """A file of random records over an alphabet rich in delimiter, escape and newline bytes."""
    rnd = random.Random(seed)
    pieces = [b"a", b"b", b" ", b"\n", b"\r", escapechar, escapechar + delimiter,
              escapechar + escapechar, delimiter, b"xyz"]
    weights = [8, 8, 3, 2, 1, 2, 2, 1, 2, 4]
    chunks, size = [], 0
    while size < n_bytes:
        piece = rnd.choices(pieces, weights)[0]
        chunks.append(piece)
        size += len(piece)
    data = b"".join(chunks)
    path.write_bytes(data)
    return data


@pytest.mark.parametrize("delimiter", [b"|", b"<EOR>", None], ids=["bar", "multibyte", "newline"])
def test_delimiter_and_escapes_across_splits(make_pipeline, tmp_path, delimiter):
    path = tmp_path / "big.txt"
    data = _big_escaped_file(path, delimiter or b"\n", b"\\", 3 * 1024 * 1024 + 77, seed=7)
    read = beam.ReadFromText(str(path), delimiter=delimiter, escapechar=b"\\", skip_header_lines=3)
    assert len(read._source.split(4)) >= 3  # the file is read as several byte ranges
    expected = _decoded(reference_records(data, delimiter, b"\\", True, 3))
    assert len(expected) > 10_000
    with make_pipeline() as p:
        got = p | read | beam.combiners.Count.Globally()
        assert_that(got, equal_to([len(expected)]), label="count")
        digest = (p | "Again" >> beam.ReadFromText(str(path), delimiter=delimiter, escapechar=b"\\",
                                                   skip_header_lines=3)
                  | beam.combiners.ToList() | beam.Map(sorted))
        assert_that(digest, equal_to([sorted(expected)]), label="records")


def test_custom_delimiter_without_escapes_keeps_delimiters_when_not_stripping(make_pipeline, tmp_path):
    path = tmp_path / "d.txt"
    data = b"".join(b"rec%d\n%d;#" % (i, i) for i in range(150_000))  # ~2.4 MB
    path.write_bytes(data)
    expected = _decoded(reference_records(data, b";#", None, False, 0))
    assert expected[:2] == ["rec0\n0;#", "rec1\n1;#"]
    with make_pipeline() as p:
        got = (p | beam.ReadFromText(str(path), delimiter=b";#", strip_trailing_newlines=False)
               | beam.combiners.ToList() | beam.Map(sorted))
        assert_that(got, equal_to([sorted(expected)]))


def test_escaped_carriage_return_and_newline(make_pipeline, tmp_path):
    # Beam: an escaped '\r' before '\n' stays in the record and only '\n' ends it; an escaped
    # '\n' does not end the record; an escaped escape does not escape what follows it.
    data = b"one\\\r\ntwo\r\nthree\\\nmore\nfour\\\\\nfive"
    (tmp_path / "e.txt").write_bytes(data)
    expected = ["one\\\r", "two", "three\\\nmore", "four\\\\", "five"]
    assert _decoded(reference_records(data, None, b"\\")) == expected
    with make_pipeline() as p:
        got = p | beam.ReadFromText(str(tmp_path / "e.txt"), escapechar=b"\\")
        assert_that(got, equal_to(expected))


def test_skip_header_lines_longer_than_a_split(make_pipeline, tmp_path):
    header = [("h%d " % i) * 150_000 for i in range(3)]  # ~1.35 MB of header records
    body = [f"row {i}" for i in range(20_000)]
    path = tmp_path / "h.csv"
    path.write_text("\n".join(header + body) + "\n")
    read = beam.ReadFromText(str(path), skip_header_lines=3)
    assert len(read._source.split(4)) >= 2
    with make_pipeline() as p:
        got = p | read | beam.combiners.ToList() | beam.Map(sorted)
        assert_that(got, equal_to([sorted(body)]))


def test_byte_ranges_with_delimiters_escapes_and_headers_read_every_record_once(tmp_path, monkeypatch):
    # Runner-free: the parts of any cut of a file, read in turn, give the file's records.
    from hypothesis import given, settings, strategies as st

    import headrace.io.textio as textio

    monkeypatch.setattr(textio, "_CHUNK", 5)
    piece = st.sampled_from([b"a", b"b", b"\n", b"\r", b"\\", b"|", b"#|", b"e\xcc\x81"])

    @settings(max_examples=300, deadline=None)
    @given(pieces=st.lists(piece, max_size=30), delimiter=st.sampled_from([None, b"|", b"#|"]),
           escape=st.sampled_from([None, b"\\"]), strip=st.booleans(), skip=st.integers(0, 3),
           cuts=st.lists(st.integers(min_value=0, max_value=80), max_size=5))
    def check(pieces, delimiter, escape, strip, skip, cuts):
        data = b"".join(pieces)
        path = tmp_path / "f.txt"
        path.write_bytes(data)
        source = beam.ReadFromText(str(path), delimiter=delimiter, escapechar=escape,
                                   strip_trailing_newlines=strip, skip_header_lines=skip)._source
        bounds = sorted({0, len(data), *(c for c in cuts if c < len(data))})
        got = []
        for start, end in zip(bounds, bounds[1:]):
            got += list(source.read((str(path), start, end)))
        assert got == _decoded(reference_records(data, delimiter, escape, strip, skip))

    check()


def test_read_from_text_with_filename(make_pipeline, tmp_path):
    expected = []
    for i in range(3):
        lines = [f"f{i} line {j}" for j in range(4)]
        (tmp_path / f"in{i}.txt").write_text("\n".join(lines) + "\n")
        expected += [(str(tmp_path / f"in{i}.txt"), line) for line in lines]
    with make_pipeline() as p:
        got = p | ReadFromTextWithFilename(str(tmp_path / "in*.txt"))
        assert_that(got, equal_to(expected))


def test_read_all_from_text_reads_each_pattern(make_pipeline, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a_lines = [f"a{i}" for i in range(5)]
    b_lines = [f"b{i}" for i in range(7)]
    (tmp_path / "a" / "1.txt").write_text("\n".join(a_lines[:2]) + "\n")
    (tmp_path / "a" / "2.txt").write_text("\n".join(a_lines[2:]) + "\n")
    with gzip.open(tmp_path / "b" / "1.txt.gz", "wt") as fh:
        fh.write("\n".join(b_lines) + "\n")
    patterns = [str(tmp_path / "a" / "*.txt"), "file://" + str(tmp_path / "b" / "1.txt.gz"),
                str(tmp_path / "none-*.txt")]
    with make_pipeline() as p:
        got = p | beam.Create(patterns) | ReadAllFromText()
        assert_that(got, equal_to(a_lines + b_lines), label="lines")
        named = p | "Names" >> beam.Create(patterns[:1]) | "WithName" >> ReadAllFromText(with_filename=True)
        assert_that(named, equal_to([(str(tmp_path / "a" / "1.txt"), x) for x in a_lines[:2]]
                                    + [(str(tmp_path / "a" / "2.txt"), x) for x in a_lines[2:]]),
                    label="named")


def test_read_all_from_text_splits_large_files_with_escapes(make_pipeline, tmp_path):
    path = tmp_path / "big.txt"
    data = _big_escaped_file(path, b"|", b"\\", 600_000, seed=11)
    expected = _decoded(reference_records(data, b"|", b"\\", True, 1))
    with make_pipeline() as p:
        got = (p | beam.Create([str(path)])
               | ReadAllFromText(desired_bundle_size=50_000, delimiter=b"|", escapechar=b"\\",
                                 skip_header_lines=1)
               | beam.combiners.ToList() | beam.Map(sorted))
        assert_that(got, equal_to([sorted(expected)]))


@pytest.mark.parametrize("delimiter", [None, b"|"])
def test_read_all_from_text_reads_each_record_once_when_the_runner_splits(make_pipeline, tmp_path,
                                                                          delimiter):
    # lines over several of the reader's 1 MB buffers (4 MB), ranges of 1.5 MB, split at random
    # points while read (the local and Spark batch runners' --sdf_test_split_probability)
    sep = "|" if delimiter else "\n"
    records = [f"r{i}-" + "x" * (i % 37) for i in range(160_000 if delimiter is None else 6_000)]
    path = tmp_path / "split.txt"
    path.write_text(sep.join(records) + ("\r\n" if delimiter is None else ""))
    with make_pipeline(sdf_test_split_probability=0.5, sdf_test_split_seed=1) as p:
        got = (p | beam.Create([str(path)])
               | ReadAllFromText(desired_bundle_size=1_500_000 if delimiter is None else 40_000,
                                 delimiter=delimiter)
               | beam.combiners.ToList() | beam.Map(sorted))
        assert_that(got, equal_to([sorted(records)]))


def test_read_all_from_text_keeps_the_pattern_timestamp(make_pipeline, tmp_path):
    (tmp_path / "t.txt").write_text("x\ny\n")
    with make_pipeline() as p:
        got = (p | beam.Create([beam.window.TimestampedValue(str(tmp_path / "t.txt"), 42)])
               | ReadAllFromText()
               | beam.Map(lambda line, ts=beam.DoFn.TimestampParam: (line, float(ts))))
        assert_that(got, equal_to([("x", 42.0), ("y", 42.0)]))


def test_read_all_from_text_missing_file_names_it(make_pipeline, tmp_path):
    p = make_pipeline(max_bundle_attempts=1)
    p | beam.Create([str(tmp_path / "missing.txt")]) | "ReadAll" >> ReadAllFromText()
    with pytest.raises(PipelineExecutionError, match=r"ReadAll.*missing\.txt.*check the path"):
        p.run()


def _compress(kind, data):
    return {"gzip": gzip.compress, "bzip2": bz2.compress, "lzma": lzma.compress,
            "deflate": zlib.compress}[kind](data)


@pytest.mark.parametrize("kind, suffix", [("gzip", ".gz"), ("bzip2", ".bz2"), ("lzma", ".xz"),
                                          ("deflate", ".deflate")])
def test_compression_types_by_suffix_and_by_name(make_pipeline, tmp_path, kind, suffix):
    lines = [f"line {i} of {kind}" for i in range(2_000)]
    data = ("\n".join(["header"] + lines) + "\n").encode()
    packed = _compress(kind, data)   # once: gzip's header holds the time it was made
    (tmp_path / f"auto{suffix}").write_bytes(packed)
    (tmp_path / "named.dat").write_bytes(packed)
    assert CompressionTypes.detect_compression_type(f"x{suffix.upper()}") == kind
    with make_pipeline() as p:
        auto = p | "Auto" >> beam.ReadFromText(str(tmp_path / f"auto{suffix}"), skip_header_lines=1)
        assert_that(auto, equal_to(lines), label="auto")
        named = p | "Named" >> beam.ReadFromText(str(tmp_path / "named.dat"), skip_header_lines=1,
                                                 compression_type=kind)
        assert_that(named, equal_to(lines), label="named")
        raw = p | "Raw" >> beam.ReadFromText(str(tmp_path / f"auto{suffix}"),
                                             compression_type=CompressionTypes.UNCOMPRESSED,
                                             coder=beam.coders.BytesCoder())
        assert_that(raw | beam.combiners.ToList() | beam.Map(lambda rs: b"\n".join(sorted(rs))),
                    equal_to([b"\n".join(sorted(packed.split(b"\n")))]),
                    label="raw")


@pytest.mark.parametrize("kind, suffix", [("bzip2", ".bz2"), ("lzma", ".xz"), ("deflate", ".deflate")])
def test_write_to_text_compresses_by_suffix(make_pipeline, tmp_path, kind, suffix):
    lines = [f"w{i}" for i in range(50)]
    with make_pipeline() as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "out"), file_name_suffix=".txt" + suffix,
                                                  num_shards=1)
    raw = (tmp_path / f"out-00000-of-00001.txt{suffix}").read_bytes()
    plain = {"bzip2": bz2.decompress, "lzma": lzma.decompress, "deflate": zlib.decompress}[kind](raw)
    assert sorted(plain.decode().splitlines()) == sorted(lines)


def test_read_from_json_with_beam_text_options(make_pipeline, tmp_path):
    values = [{"i": i, "tags": ["x"] * (i % 3)} for i in range(30)]
    (tmp_path / "v.jsonl.gz").write_bytes(gzip.compress(
        ("# header\n" + "\n".join(json.dumps(v) for v in values) + "\n").encode()))
    (tmp_path / "d.json").write_text("skip me|" + "|".join(json.dumps(v) for v in values))
    with make_pipeline() as p:
        got = p | "Gz" >> ReadFromJson(str(tmp_path / "v.jsonl.gz"), skip_header_lines=1)
        assert_that(got, equal_to(values), label="gzip")
        delimited = p | "Delim" >> ReadFromJson(str(tmp_path / "d.json"), delimiter=b"|",
                                                skip_header_lines=1)
        assert_that(delimited, equal_to(values), label="delimited")


def test_read_from_json_document_refuses_line_options(tmp_path):
    (tmp_path / "doc.json").write_text("[1, 2]")
    with pytest.raises(InvalidArgumentError, match="lines=False.*delimiter"):
        ReadFromJson(str(tmp_path / "doc.json"), lines=False, delimiter=b"|")


@pytest.mark.parametrize("make, name", [
    (lambda d: beam.ReadFromText(d, compression_type="snappy", validate=False), "compression_type"),
    (lambda d: beam.ReadFromText(d, skip_header_lines=-1, validate=False), "skip_header_lines"),
    (lambda d: beam.ReadFromText(d, delimiter=b"\\;", escapechar=b"\\", validate=False), "escape"),
    (lambda d: ReadFromTextWithFilename(d, delimiter="|", validate=False), "ReadFromTextWithFilename"),
    (lambda d: ReadAllFromText(desired_bundle_size=0), "desired_bundle_size"),
    (lambda d: ReadAllFromText(escapechar=b"ab"), "ReadAllFromText.*escapechar"),
])
def test_bad_arguments_are_refused_naming_them(tmp_path, make, name):
    with pytest.raises(InvalidArgumentError, match=name):
        make(str(tmp_path / "x"))


def test_unknown_scheme_is_refused_naming_it(tmp_path):
    with pytest.raises(UnsupportedArgumentError, match="'gs'.*local paths and file://"):
        beam.ReadFromText("gs://bucket/data-*.txt")
    with pytest.raises(UnsupportedArgumentError, match="'s3'"):
        ReadFromJson("s3://bucket/x.json", validate=False)


def test_file_url_reads_the_local_file(make_pipeline, tmp_path):
    (tmp_path / "u.txt").write_text("p\nq\n")
    with make_pipeline() as p:
        got = p | beam.ReadFromText("file://" + str(tmp_path / "u.txt"))
        assert_that(got, equal_to(["p", "q"]))
    assert os.path.exists(tmp_path / "u.txt")


def test_undecodable_record_in_a_later_split_names_its_number(make_pipeline, tmp_path):
    records = [b"r%07d" % i for i in range(300_000)]  # 2.7 MB with the delimiters
    bad = 250_000
    records[bad] = b"\xff\xfe bad"
    (tmp_path / "r.txt").write_bytes(b"<EOR>".join([b"h"] + records))
    p = make_pipeline(max_bundle_attempts=1)
    p | "ReadRecords" >> beam.ReadFromText(str(tmp_path / "r.txt"), delimiter=b"<EOR>",
                                           skip_header_lines=1)
    with pytest.raises(PipelineExecutionError, match=f"ReadRecords.*record {bad + 2} could not"):
        p.run()
