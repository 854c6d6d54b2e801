"""ReadFromText / WriteToText arguments beyond the basics, with Beam's meaning.

Coders (`coder=`: a JSON coder reads and writes JSON lines, Beam's StrUtf8Coder / BytesCoder /
ToBytesCoder), custom record delimiters and escape bytes, `min_bundle_size`,
`max_records_per_shard`, `max_bytes_per_shard`, `skip_if_empty` and `triggering_frequency`;
arguments headrace cannot honour are refused with an error naming them. Expected contents
come from plain Python (`json`, file reads and writes).
"""

from __future__ import annotations

import collections
import json
import os

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineExecutionError
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to


class JsonCoder(beam.coders.Coder):
    """Beam's cookbook JSON coder: one JSON value per line."""

    def encode(self, value):
        return json.dumps(value, sort_keys=True).encode("utf-8")

    def decode(self, encoded):
        return json.loads(encoded)


class DuckJsonCoder:
    """A coder that is not a Coder subclass, only has encode / decode (Beam accepts those too)."""

    def encode(self, value):
        return json.dumps(value, sort_keys=True).encode("utf-8")

    def decode(self, encoded):
        return json.loads(encoded.decode("utf-8"))


RECORDS = [{"id": i, "name": f"n{i}", "tags": ["a"] * (i % 3), "score": i / 4, "ok": i % 2 == 0}
           for i in range(23)] + [{"id": 99, "name": "ünïcödé ✓", "nested": {"x": None}}]


def _files(root):
    return sorted(f for f in os.listdir(root) if not f.startswith("."))


def _lines(root):
    out = []
    for name in _files(root):
        with open(os.path.join(root, name), "rb") as fh:
            out += fh.read().splitlines()
    return out


def _canonical(records):
    return sorted(json.dumps(r, sort_keys=True) for r in records)


@pytest.mark.parametrize("coder_cls", [JsonCoder, DuckJsonCoder])
def test_json_coder_round_trip(make_pipeline, tmp_path, coder_cls):
    out = tmp_path / "out"
    with make_pipeline(bundle_size=5) as p:
        p | beam.Create(RECORDS) | beam.WriteToText(str(out / "rec"), file_name_suffix=".jsonl",
                                                    coder=coder_cls())
    lines = _lines(out)
    assert sorted(lines) == sorted(json.dumps(r, sort_keys=True).encode("utf-8") for r in RECORDS)

    with make_pipeline() as p:
        back = p | beam.ReadFromText(str(out / "rec-*.jsonl"), coder=coder_cls())
        assert_that(back | beam.Map(lambda r: json.dumps(r, sort_keys=True)),
                    equal_to(_canonical(RECORDS)))


def test_beam_builtin_coders(make_pipeline, tmp_path):
    raw = [b"\x00\xffbinary", b"plain", "ünï".encode("utf-8")]
    path = tmp_path / "in.bin"
    path.write_bytes(b"\n".join(raw) + b"\n")
    with make_pipeline() as p:
        as_bytes = p | "Bytes" >> beam.ReadFromText(str(path), coder=beam.coders.BytesCoder())
        assert_that(as_bytes, equal_to(raw), label="bytes")
        texts = ["a", "ünï", "z z"]
        (tmp_path / "in.txt").write_text("\n".join(texts), encoding="utf-8")
        as_str = p | "Str" >> beam.ReadFromText(str(tmp_path / "in.txt"),
                                                coder=beam.coders.StrUtf8Coder())
        assert_that(as_str, equal_to(texts), label="str")
        (p | "Values" >> beam.Create([b"raw bytes", 12, "text"])
         | beam.WriteToText(str(tmp_path / "w"), coder=beam.coders.ToBytesCoder(), num_shards=1))
    expected = sorted(v if isinstance(v, bytes) else str(v).encode() for v in [b"raw bytes", 12, "text"])
    assert sorted((tmp_path / "w-00000-of-00001").read_bytes().splitlines()) == expected


def test_header_and_footer_are_text_whatever_the_coder(make_pipeline, tmp_path):
    records = [{"k": i} for i in range(4)]
    with make_pipeline() as p:
        p | beam.Create(records) | beam.WriteToText(str(tmp_path / "t"), coder=JsonCoder(),
                                                     header="# begin", footer="# end", num_shards=1)
    lines = (tmp_path / "t-00000-of-00001").read_text().splitlines()
    assert lines[0] == "# begin" and lines[-1] == "# end"
    assert sorted(lines[1:-1]) == sorted(json.dumps(r, sort_keys=True) for r in records)


def test_undecodable_line_names_file_and_line(make_pipeline, tmp_path):
    good = [json.dumps({"i": i}) for i in range(5)]
    lines = good[:3] + ["{not json"] + good[3:]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    bad_line_no = lines.index("{not json") + 1
    p = make_pipeline()
    p | "ReadJson" >> beam.ReadFromText(str(path), coder=JsonCoder())
    with pytest.raises(PipelineExecutionError) as info:
        p.run()
    msg = str(info.value)
    assert "ReadJson" in msg and str(path) in msg and f"line {bad_line_no}" in msg
    assert "JsonCoder" in msg


def test_coder_that_cannot_encode_names_the_step(make_pipeline, tmp_path):
    p = make_pipeline(max_bundle_attempts=1)
    p | beam.Create([{"when": object()}]) | "WriteJson" >> beam.WriteToText(
        str(tmp_path / "o"), coder=JsonCoder())
    with pytest.raises(PipelineExecutionError, match="WriteJson.*could not encode"):
        p.run()


@pytest.mark.parametrize("strip", [True, False])
def test_custom_delimiter_and_escapechar(make_pipeline, tmp_path, strip):
    records = ["plain", "with\\|escaped bar", "", "line\nbreak", "ends in escaped escape\\\\", "last"]
    data = "|".join(records).encode("utf-8")
    (tmp_path / "d.txt").write_bytes(data)
    expected = records if strip else [r + "|" for r in records[:-1]] + [records[-1]]
    with make_pipeline() as p:
        got = p | beam.ReadFromText(str(tmp_path / "d.txt"), delimiter=b"|", escapechar=b"\\",
                                    strip_trailing_newlines=strip, skip_header_lines=1)
        assert_that(got, equal_to(expected[1:]))


def test_escaped_newlines_stay_in_the_record(make_pipeline, tmp_path):
    records = ["one\\\ncontinued", "two", "three\\\\"]
    (tmp_path / "e.txt").write_text("\n".join(records) + "\n")
    with make_pipeline() as p:
        got = p | beam.ReadFromText(str(tmp_path / "e.txt"), escapechar=b"\\")
        assert_that(got, equal_to(records))


def test_min_bundle_size_makes_fewer_larger_splits(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("".join(f"{i:07d}\n" for i in range(600_000)))  # 4.8 MB
    size = os.path.getsize(path)
    default_parts = beam.ReadFromText(str(path))._source.split(8)
    big_parts = beam.ReadFromText(str(path), min_bundle_size=size // 2)._source.split(8)
    assert len(default_parts) > len(big_parts) == 2
    assert all(end - start >= size // 2 for _, start, end in big_parts[:-1])


def test_max_records_per_shard(make_pipeline, tmp_path):
    lines = [f"row {i}" for i in range(57)]
    with make_pipeline(bundle_size=25) as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "m"), max_records_per_shard=10)
    names = _files(tmp_path)
    per_file = [(tmp_path / n).read_text().splitlines() for n in names]
    assert all(0 < len(f) <= 10 for f in per_file), [len(f) for f in per_file]
    assert len(names) >= -(-len(lines) // 10)
    assert collections.Counter(x for f in per_file for x in f) == collections.Counter(lines)
    assert names == [f"m-{i:05d}-of-{len(names):05d}" for i in range(len(names))]


def test_max_bytes_per_shard_counts_header_and_lines(make_pipeline, tmp_path):
    lines = [f"value-{i:03d}" for i in range(40)]  # 10 bytes + newline each
    limit = 60
    with make_pipeline(bundle_size=40) as p:
        p | beam.Create(lines) | beam.WriteToText(str(tmp_path / "b"), header="HEAD",
                                                  max_bytes_per_shard=limit)
    contents = [(tmp_path / n).read_bytes() for n in _files(tmp_path)]
    for c in contents:
        body = c.splitlines(keepends=True)
        assert body[0] == b"HEAD\n"
        # a file rolls over once it reached the limit, so without its last line it was below it
        assert len(c) - len(body[-1]) < limit, c
    # one bundle: every file but the one open at the bundle's end reached the limit
    assert sum(len(c) < limit for c in contents) <= 1, [len(c) for c in contents]
    data = [x for c in contents for x in c.decode().splitlines()[1:]]
    assert collections.Counter(data) == collections.Counter(lines)


def test_skip_if_empty_writes_nothing_and_removes_old_shards(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(["old"]) | beam.WriteToText(str(tmp_path / "s"), num_shards=2)
    assert len(_files(tmp_path)) == 2
    with make_pipeline() as p:
        written = (p | beam.Create([]) | beam.WriteToText(str(tmp_path / "s"), num_shards=2,
                                                          skip_if_empty=True))
        assert_that(written, equal_to([]))
    assert os.listdir(tmp_path) == []
    with make_pipeline() as p:  # not empty: the shards are all written, padded as usual
        p | beam.Create(["x"]) | beam.WriteToText(str(tmp_path / "s"), num_shards=2, skip_if_empty=True)
    assert _files(tmp_path) == ["s-00000-of-00002", "s-00001-of-00002"]


def test_triggering_frequency_has_no_effect_on_bounded_input(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(["a", "b"]) | beam.WriteToText(str(tmp_path / "f"), triggering_frequency=60)
    assert sorted(_lines(tmp_path)) == [b"a", b"b"]


def test_triggering_frequency_on_unbounded_input_is_refused(make_pipeline, tmp_path):
    p = make_pipeline()
    stream = TestStream().add_elements(["a"]).advance_watermark_to_infinity()
    with pytest.raises(InvalidArgumentError, match="triggering_frequency"):
        p | stream | "Out" >> beam.WriteToText(str(tmp_path / "f"), triggering_frequency=60)


@pytest.mark.parametrize("make, name", [
    (lambda d: beam.WriteToText(d, num_shards=3, max_records_per_shard=5), "max_records_per_shard"),
    (lambda d: beam.WriteToText(d, shard_name_template="", max_bytes_per_shard=5), "max_bytes_per_shard"),
    (lambda d: beam.WriteToText(d, max_records_per_shard=0), "max_records_per_shard"),
    (lambda d: beam.WriteToText(d, shard_name_template="-W-SSSSS"), "shard_name_template"),
    (lambda d: beam.WriteToText(d, shard_name_template="-part"), "shard_name_template"),
    (lambda d: beam.WriteToText(d, coder=JsonCoder), "coder"),
    (lambda d: beam.WriteToText(d, coder="json"), "coder"),
    (lambda d: beam.ReadFromText(d, coder=object(), validate=False), "coder"),
    (lambda d: beam.ReadFromText(d, delimiter="|", validate=False), "delimiter"),
    (lambda d: beam.ReadFromText(d, delimiter=b"aa", validate=False), "delimiter"),
    (lambda d: beam.ReadFromText(d, escapechar=b"//", validate=False), "escapechar"),
    (lambda d: beam.ReadFromText(d, min_bundle_size=-1, validate=False), "min_bundle_size"),
])
def test_bad_text_arguments_are_refused_naming_them(tmp_path, make, name):
    with pytest.raises(InvalidArgumentError, match=name):
        make(str(tmp_path / "x"))


def test_unknown_keyword_arguments_are_refused(tmp_path):
    with pytest.raises(TypeError, match="no_such_option"):
        beam.WriteToText(str(tmp_path / "x"), no_such_option=1)
    with pytest.raises(TypeError, match="no_such_option"):
        beam.ReadFromText(str(tmp_path / "x"), validate=False, no_such_option=1)
    assert beam.ReadFromText(str(tmp_path / "x"), validate=False, label="Named").label == "Named"
