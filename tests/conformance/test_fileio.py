"""JSON lines and Parquet files: ReadFromJson / WriteToJson, ReadFromParquet(Batched) / WriteToParquet.

Writes produce Beam shard names `prefix-SSSSS-of-NNNNN suffix` exactly once (no duplicates after
retried bundles, no temporary files left behind, a re-run replaces the previous run's shards);
reads return every record of every matching file exactly once, however they are split.
Expected contents come from plain Python: `json` and `pyarrow.parquet` directly.
"""

from __future__ import annotations

import collections
import gzip
import json
import os
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.io.jsonio import ReadFromJson, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.testing.util import assert_that, equal_to
from tests._support import Once


def _all_entries(root):
    """Every file and directory under root (to spot temporary files and directories)."""
    out = []
    for d, dirs, files in os.walk(root):
        out += [os.path.relpath(os.path.join(d, x), root) for x in dirs + files]
    return sorted(out)


def _shard_names(prefix, suffix, n):
    return [f"{prefix}-{i:05d}-of-{n:05d}{suffix}" for i in range(n)]


def _check_shard_names(names, prefix, suffix):
    pattern = re.compile(re.escape(prefix) + r"-(\d{5})-of-(\d{5})" + re.escape(suffix) + "$")
    matches = [pattern.match(n) for n in names]
    assert names and all(matches), f"unexpected file names {names}"
    n = int(matches[0].group(2))
    assert names == _shard_names(prefix, suffix, n), names
    return n


def _json_lines(path):
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def _parquet_rows(path):
    return pq.read_table(path).to_pylist()


def _messages(exc):
    """The text of an exception and of everything it was raised from."""
    seen, out = set(), []
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        out.append(str(exc))
        exc = exc.__cause__ or exc.__context__
    return "\n".join(out)


RECORDS = [
    {"id": 1, "name": "alpha", "tags": ["a", "b"], "score": 1.5, "ok": True},
    {"id": 2, "name": "ünïcödé ✓", "tags": [], "score": None, "ok": False},
    {"id": 3, "name": "nested", "tags": ["x"], "score": -2.25, "ok": True, "extra": {"k": [1, {"z": None}]}},
    "a bare string", 42, [1, 2, 3], None,
] + [{"id": i, "name": f"row {i}", "tags": [str(i)], "score": i / 4, "ok": i % 2 == 0} for i in range(10, 40)]

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("score", pa.float64()),
                    ("ok", pa.bool_()), ("tags", pa.list_(pa.string()))])
ROWS = [{"id": i, "name": f"name-{i}", "score": None if i % 7 == 0 else i * 0.5, "ok": i % 3 == 0,
         "tags": [f"t{j}" for j in range(i % 3)]} for i in range(60)]


# ---------------------------------------------------------------------------------------
# JSON


def test_json_round_trip(make_pipeline, tmp_path):
    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=8) as p:
        p | beam.Create(RECORDS) | WriteToJson(str(out_dir / "events"))
    names = _all_entries(out_dir)
    _check_shard_names(names, "events", ".json")
    lines = []
    for n in names:
        lines += (out_dir / n).read_bytes().decode("utf-8").splitlines()
    assert collections.Counter(map(json.dumps, map(json.loads, lines))) == collections.Counter(
        map(json.dumps, RECORDS))
    assert '{"id": 2, "name": "ünïcödé ✓", "tags": [], "score": null, "ok": false}' in lines  # key order kept

    with make_pipeline(bundle_size=5) as p:
        assert_that(p | ReadFromJson(str(out_dir / "events-*.json")), equal_to(RECORDS))


def test_json_num_shards_gives_beam_shard_names(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(RECORDS) | WriteToJson(str(tmp_path / "out"), num_shards=3)
    names = _all_entries(tmp_path)
    assert names == ["out-00000-of-00003.json", "out-00001-of-00003.json", "out-00002-of-00003.json"]
    records = [r for n in names for r in _json_lines(tmp_path / n)]
    assert sorted(map(json.dumps, records)) == sorted(map(json.dumps, RECORDS))


def test_json_gzip_round_trip(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(RECORDS) | WriteToJson(str(tmp_path / "z"), file_name_suffix=".jsonl.gz")
    names = _all_entries(tmp_path)
    _check_shard_names(names, "z", ".jsonl.gz")
    for n in names:
        assert (tmp_path / n).read_bytes()[:2] == b"\x1f\x8b", "not gzip"
    assert sorted(map(json.dumps, (r for n in names for r in _json_lines(tmp_path / n)))) == sorted(
        map(json.dumps, RECORDS))
    # an explicit compression type reads gzip data whatever the file is called
    with gzip.open(tmp_path / "plain-name.data", "wt", encoding="utf-8") as fh:
        fh.write('{"x": 1}\n{"x": 2}\n')
    with make_pipeline() as p:
        assert_that(p | ReadFromJson(str(tmp_path / "z-*")), equal_to(RECORDS), label="Auto")
        explicit = p | "Explicit" >> ReadFromJson(str(tmp_path / "plain-name.data"),
                                                  compression_type="gzip")
        assert_that(explicit, equal_to([{"x": 1}, {"x": 2}]), label="CheckExplicit")


def test_read_json_skips_blank_lines_and_reads_documents_with_lines_false(make_pipeline, tmp_path):
    (tmp_path / "a.jsonl").write_text('{"a": 1}\n\n  \n{"a": 2}\r\n[3]\n"s"')
    (tmp_path / "doc-1.json").write_text('[{"d": 1},\n {"d": 2}]')
    (tmp_path / "doc-2.json").write_text('{"whole": {"doc": true}}')
    with make_pipeline() as p:
        assert_that(p | ReadFromJson(str(tmp_path / "a.jsonl")),
                    equal_to([{"a": 1}, {"a": 2}, [3], "s"]), label="Lines")
        assert_that(p | "Docs" >> ReadFromJson(str(tmp_path / "doc-*.json"), lines=False),
                    equal_to([{"d": 1}, {"d": 2}, {"whole": {"doc": True}}]), label="CheckDocs")


def _big_json_lines(path, n):
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            fh.write(json.dumps({"i": i, "pad": "x" * (i % 97)}) + "\n")


def test_read_json_large_file_split_into_ranges_reads_each_line_once(make_pipeline, tmp_path):
    n = 40000  # about 3 MB: split into byte ranges
    path = tmp_path / "big.jsonl"
    _big_json_lines(path, n)
    assert path.stat().st_size > 2 * 1024 * 1024
    with make_pipeline() as p:
        ids = (p | ReadFromJson(str(path)) | beam.Map(lambda r: r["i"])
               | beam.combiners.ToList() | beam.Map(sorted))
        assert_that(ids, equal_to([list(range(n))]))


@pytest.mark.parametrize("bad_line", [3, 38000], ids=["first-range", "later-range"])
def test_malformed_json_line_names_file_and_line(make_pipeline, tmp_path, bad_line):
    path = tmp_path / "broken.jsonl"
    _big_json_lines(path, 40000 if bad_line > 100 else 10)
    lines = path.read_text().splitlines()
    lines[bad_line - 1] = '{"i": 1,, "oops": true}'
    path.write_text("\n".join(lines) + "\n")
    p = make_pipeline()
    p | ReadFromJson(str(path)) | beam.Map(lambda r: r)
    with pytest.raises(Exception) as info:
        p.run().wait_until_finish()
    text = _messages(info.value)
    assert f"{path} line {bad_line} is not valid JSON" in text
    assert "fix or remove that line" in text


def test_write_json_of_unencodable_value_names_the_step(make_pipeline, tmp_path):
    p = make_pipeline()
    p | beam.Create([{"ok": 1}, {"when": {1, 2}}]) | "WriteEvents" >> WriteToJson(str(tmp_path / "o"))
    with pytest.raises(Exception) as info:
        p.run().wait_until_finish()
    text = _messages(info.value)
    assert "step 'WriteEvents' cannot write {'when': {1, 2}} as JSON" in text
    assert "convert others first" in text


def test_read_json_missing_file_raises_at_construction(tmp_path):
    with pytest.raises(PipelineConstructionError, match="ReadFromJson"):
        ReadFromJson(str(tmp_path / "nothing-*.json"))
    with pytest.raises(InvalidArgumentError):
        WriteToJson(str(tmp_path / "x"), compression_type="zip")


# ---------------------------------------------------------------------------------------
# Parquet


def test_parquet_round_trip_with_several_row_groups(make_pipeline, tmp_path):
    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=25) as p:
        p | beam.Create(ROWS) | WriteToParquet(str(out_dir / "rows"), SCHEMA, record_batch_size=4,
                                               row_group_buffer_size=1, file_name_suffix=".parquet")
    names = _all_entries(out_dir)
    _check_shard_names(names, "rows", ".parquet")
    files = [pq.ParquetFile(out_dir / n) for n in names]
    assert all(f.schema_arrow.equals(SCHEMA) for f in files)
    assert all(f.metadata.row_group(0).num_rows <= 4 for f in files if f.metadata.num_row_groups)
    assert sum(f.metadata.num_row_groups for f in files) >= len(ROWS) // 4
    assert sorted((r for n in names for r in _parquet_rows(out_dir / n)), key=lambda r: r["id"]) == ROWS

    with make_pipeline(bundle_size=7) as p:
        back = p | ReadFromParquet(str(out_dir / "rows-*.parquet"))
        assert_that(back, equal_to(ROWS))
        types = back | beam.Map(lambda r: tuple(type(r[k]).__name__ for k in ("id", "name", "ok")))
        assert_that(types | beam.Distinct(), equal_to([("int", "str", "bool")]), label="Types")


def test_parquet_num_shards_gives_beam_shard_names_even_with_fewer_rows(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(ROWS[:2]) | WriteToParquet(str(tmp_path / "out"), SCHEMA, num_shards=3,
                                                   file_name_suffix=".parquet")
    names = _all_entries(tmp_path)
    assert names == ["out-00000-of-00003.parquet", "out-00001-of-00003.parquet",
                     "out-00002-of-00003.parquet"]
    assert all(pq.read_schema(tmp_path / n).equals(SCHEMA) for n in names)
    rows = [r for n in names for r in _parquet_rows(tmp_path / n)]
    assert sorted(rows, key=lambda r: r["id"]) == ROWS[:2]


def _write_parquet_files(directory, n_files=3, rows_per_file=40, row_group_size=6):
    directory.mkdir(exist_ok=True)
    expected = []
    for f in range(n_files):
        rows = [{"file": f, "i": i, "label": f"f{f}-r{i}", "v": float(i) if i % 5 else None}
                for i in range(rows_per_file)]
        pq.write_table(pa.Table.from_pylist(rows), directory / f"part-{f}.parquet",
                       row_group_size=row_group_size)
        expected += rows
    return expected


def test_read_parquet_many_files_and_row_groups_reads_each_row_once(make_pipeline, tmp_path):
    expected = _write_parquet_files(tmp_path / "in")
    (tmp_path / "in" / "other.txt").write_text("not parquet, not matched")
    assert pq.ParquetFile(tmp_path / "in" / "part-0.parquet").metadata.num_row_groups == 7
    with make_pipeline(bundle_size=10) as p:
        assert_that(p | ReadFromParquet(str(tmp_path / "in" / "part-*.parquet")), equal_to(expected))
        assert_that(p | "BigBundles" >> ReadFromParquet(str(tmp_path / "in" / "*.parquet"),
                                                         min_bundle_size=10**9),
                    equal_to(expected), label="CheckBigBundles")


def test_read_parquet_columns_projection(make_pipeline, tmp_path):
    expected = _write_parquet_files(tmp_path / "in", n_files=2)
    with make_pipeline() as p:
        out = p | ReadFromParquet(str(tmp_path / "in" / "*.parquet"), columns=["label", "v"])
        assert_that(out, equal_to([{"label": r["label"], "v": r["v"]} for r in expected]))


def test_read_parquet_as_rows(make_pipeline, tmp_path):
    expected = _write_parquet_files(tmp_path / "in", n_files=1, rows_per_file=5)
    with make_pipeline() as p:
        out = (p | ReadFromParquet(str(tmp_path / "in" / "*.parquet"), as_rows=True)
               | beam.Map(lambda r: (type(r).__name__, r.label, r.as_dict())))
        assert_that(out, equal_to([("Row", r["label"], r) for r in expected]))


def test_read_parquet_batched_yields_one_table_per_row_group(make_pipeline, tmp_path):
    expected = _write_parquet_files(tmp_path / "in", n_files=2, rows_per_file=20, row_group_size=6)
    with make_pipeline() as p:
        tables = p | ReadFromParquetBatched(str(tmp_path / "in" / "*.parquet"), columns=["i", "label"])
        assert_that(tables | beam.Map(lambda t: (type(t).__name__, t.column_names, t.num_rows)),
                    equal_to([("Table", ["i", "label"], n) for n in [6, 6, 6, 2] * 2]), label="Shapes")
        rows = tables | beam.FlatMap(lambda t: t.to_pylist())
        assert_that(rows, equal_to([{"i": r["i"], "label": r["label"]} for r in expected]), label="Rows")


def test_write_parquet_of_empty_pcollection_writes_one_valid_empty_file(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create([]) | WriteToParquet(str(tmp_path / "empty"), SCHEMA, codec="snappy")
    assert _all_entries(tmp_path) == ["empty-00000-of-00001"]
    table = pq.read_table(tmp_path / "empty-00000-of-00001")
    assert table.num_rows == 0 and table.schema.equals(SCHEMA)


def test_write_parquet_codec(make_pipeline, tmp_path):
    with make_pipeline() as p:
        p | beam.Create(ROWS) | WriteToParquet(str(tmp_path / "z"), SCHEMA, codec="gzip", num_shards=1)
    meta = pq.ParquetFile(tmp_path / "z-00000-of-00001").metadata
    assert meta.row_group(0).column(0).compression == "GZIP"
    assert sorted(_parquet_rows(tmp_path / "z-00000-of-00001"), key=lambda r: r["id"]) == ROWS


@pytest.mark.parametrize("bad_row, expected", [
    ({"id": 1, "name": "x", "ok": True, "tags": []},
     "row {'id': 1, 'name': 'x', 'ok': True, 'tags': []} has no field 'score' of the schema"),
    ({"id": "seven", "name": "x", "score": 1.0, "ok": True, "tags": []},
     "field 'id' of row {'id': 'seven', 'name': 'x', 'score': 1.0, 'ok': True, 'tags': []} is 'seven' (str), "
     "which is not a int64"),
    (("a", "tuple"), "writes dicts (column name -> value) as Parquet rows, got ('a', 'tuple') (tuple)"),
], ids=["missing-field", "wrong-type", "not-a-dict"])
def test_write_parquet_bad_row_names_step_and_row(make_pipeline, tmp_path, bad_row, expected):
    p = make_pipeline()
    (p | beam.Create(ROWS[:5] + [bad_row] + ROWS[5:10])
     | "SaveRows" >> WriteToParquet(str(tmp_path / "o"), SCHEMA, record_batch_size=3))
    with pytest.raises(Exception) as info:
        p.run().wait_until_finish()
    text = _messages(info.value)
    assert f"step 'SaveRows': {expected}" in text or f"step 'SaveRows' {expected}" in text, text
    assert "before the write" in text


def test_write_parquet_bad_arguments_raise_at_construction(tmp_path):
    with pytest.raises(InvalidArgumentError, match="pyarrow.schema"):
        WriteToParquet(str(tmp_path / "o"), {"id": "int64"})
    with pytest.raises(InvalidArgumentError, match="codec"):
        WriteToParquet(str(tmp_path / "o"), SCHEMA, codec="rar")
    with pytest.raises(PipelineConstructionError, match="ReadFromParquet"):
        ReadFromParquet(str(tmp_path / "missing-*.parquet"))


# ---------------------------------------------------------------------------------------
# exactly once: retried bundles and re-runs, for both formats


class FlakyRow(dict):
    """A row whose fields cannot be read the first time (so the writer fails mid-file)."""

    def __init__(self, row, once):
        super().__init__(row)
        self.once = once

    def __reduce__(self):
        return FlakyRow, (dict(self), self.once)

    def _maybe_fail(self):
        if self.once.first(f"row-{dict.__getitem__(self, 'id')}"):
            raise RuntimeError("transient failure while writing")

    def __getitem__(self, key):
        self._maybe_fail()
        return super().__getitem__(key)

    def items(self):
        self._maybe_fail()
        return super().items()


def _parquet_write(prefix, **kw):
    # a row group per row: the temporary file holds rows when the bundle fails
    return WriteToParquet(prefix, SCHEMA, record_batch_size=1, row_group_buffer_size=1,
                          file_name_suffix=".parquet", **kw)


FORMATS = {"json": (WriteToJson, _json_lines, ".json"),
           "parquet": (_parquet_write, _parquet_rows, ".parquet")}


@pytest.mark.parametrize("num_shards", [0, 2])
@pytest.mark.parametrize("fmt", list(FORMATS))
def test_bundle_failing_once_while_writing_leaves_no_duplicates_or_temp_files(
        make_pipeline, tmp_path, fmt, num_shards):
    write, read, suffix = FORMATS[fmt]
    once = Once(tmp_path / "markers")
    rows = [FlakyRow(r, once) if r["id"] == 6 else r for r in ROWS[:20]]
    out_dir = tmp_path / "out"
    with make_pipeline(bundle_size=4) as p:
        p | beam.Create(rows) | write(str(out_dir / "res"), num_shards=num_shards)
    assert not once.first("row-6"), "the failure was never injected"
    names = _all_entries(out_dir)
    n = _check_shard_names(names, "res", suffix)
    assert n == (num_shards or n)
    written = [r for name in names for r in read(out_dir / name)]
    assert sorted(written, key=lambda r: r["id"]) == ROWS[:20]


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_rerun_with_fewer_shards_leaves_exactly_the_new_shards(make_pipeline, tmp_path, fmt):
    write, read, suffix = FORMATS[fmt]
    others = [f"res-unrelated{suffix}", f"other-00000-of-00001{suffix}", "res-00000-of-00001.bak"]
    for name in others:
        (tmp_path / name).write_text("not ours\n")
    with make_pipeline() as p:
        p | beam.Create(ROWS[:30]) | write(str(tmp_path / "res"), num_shards=3)
    assert _all_entries(tmp_path) == sorted(_shard_names("res", suffix, 3) + others)
    with make_pipeline() as p:
        p | beam.Create(ROWS[30:40]) | write(str(tmp_path / "res"), num_shards=2)
    assert _all_entries(tmp_path) == sorted(_shard_names("res", suffix, 2) + others)
    written = [r for name in _shard_names("res", suffix, 2) for r in read(tmp_path / name)]
    assert sorted(written, key=lambda r: r["id"]) == ROWS[30:40]
    assert all((tmp_path / name).read_text() == "not ours\n" for name in others)


def test_rerun_after_a_failed_run_removes_its_temporary_files(make_pipeline, tmp_path):
    def fail_on_last(r):
        if r["id"] == 19:
            raise ValueError("permanent failure")
        return r

    out_dir = tmp_path / "out"
    p = make_pipeline(bundle_size=4, max_bundle_attempts=1)
    p | beam.Create(ROWS[:20]) | beam.Map(fail_on_last) | WriteToJson(str(out_dir / "res"))
    with pytest.raises(Exception):
        p.run().wait_until_finish()
    if not _all_entries(out_dir):
        pytest.skip("the failed run left nothing behind on this runner")
    with make_pipeline() as p:
        p | beam.Create(ROWS[:5]) | WriteToJson(str(out_dir / "res"), num_shards=1)
    assert _all_entries(out_dir) == ["res-00000-of-00001.json"]
    assert sorted(_json_lines(out_dir / "res-00000-of-00001.json"), key=lambda r: r["id"]) == ROWS[:5]
