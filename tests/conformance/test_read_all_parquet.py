"""ReadAllFromParquet / ReadAllFromParquetBatched: a PCollection of patterns read by a splittable
DoFn over each file's row groups, on every runner. Expected rows come from the written tables."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.io.parquetio import ReadAllFromParquet, ReadAllFromParquetBatched
from headrace.testing.util import assert_that, equal_to


def _files(directory, n_files=3, rows=50, group=7):
    expected = []
    for f in range(n_files):
        table = pa.table({"f": [f] * rows, "i": list(range(rows)), "s": [f"r{i}" for i in range(rows)]})
        pq.write_table(table, os.path.join(directory, f"p{f}.parquet"), row_group_size=group)
        expected += [{"f": f, "i": i, "s": f"r{i}"} for i in range(rows)]
    return expected


@pytest.mark.parametrize("desired", [1, 1 << 30])  # a part per row group; a part per file
def test_read_all_from_parquet_reads_every_row_once(make_pipeline, tmp_path, desired):
    expected = _files(tmp_path)
    with make_pipeline() as p:
        out = (p | beam.Create([str(tmp_path / "p0.parquet"), str(tmp_path / "p[12].parquet")])
               | ReadAllFromParquet(desired_bundle_size=desired))
        assert_that(out, equal_to(expected))


def test_read_all_from_parquet_columns_and_file_names(make_pipeline, tmp_path):
    _files(tmp_path, n_files=2, rows=10, group=4)
    with make_pipeline() as p:
        out = (p | beam.Create([str(tmp_path / "*.parquet")])
               | ReadAllFromParquet(with_filename=True, columns=["i"])
               | beam.Map(lambda kv: (os.path.basename(kv[0]), kv[1]["i"], sorted(kv[1]))))
        assert_that(out, equal_to([(f"p{f}.parquet", i, ["i"]) for f in range(2) for i in range(10)]))


def test_read_all_from_parquet_batched_gives_a_table_per_row_group(make_pipeline, tmp_path):
    _files(tmp_path, n_files=1, rows=50, group=7)
    with make_pipeline() as p:
        out = (p | beam.Create([str(tmp_path / "p0.parquet")]) | ReadAllFromParquetBatched()
               | beam.Map(lambda t: (t.num_rows, min(t.column("i").to_pylist()))))
        assert_that(out, equal_to([(7, 7 * g) for g in range(7)] + [(1, 49)]))


def test_read_all_from_parquet_checks_its_arguments():
    with pytest.raises(InvalidArgumentError, match="desired_bundle_size"):
        ReadAllFromParquet(desired_bundle_size=-1)
    with pytest.raises(InvalidArgumentError, match="columns"):
        ReadAllFromParquet(columns="i")
