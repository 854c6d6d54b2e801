"""BoundedSource.part_size: a file source's parts weigh their bytes (runners spread parts over
their tasks by it), other sources' parts weigh alike."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq

from headrace.io.iobase import BoundedSource
from headrace.io.parquetio import ReadFromParquet
from headrace.io.textio import ReadFromText


def test_text_parts_weigh_their_bytes(tmp_path):
    # about 3 MB and 500 bytes: the large file is cut in parts of at least 1 MB
    for name, lines in (("a.txt", 200_000), ("b.txt", 50)):
        (tmp_path / name).write_text("".join(f"line {i:07d}\n" for i in range(lines)))
    source = ReadFromText(str(tmp_path / "*.txt"))._source
    parts = source.split(8)
    sizes = [source.part_size(p) for p in parts]
    assert len(parts) > 2
    assert sum(sizes) == sum(os.path.getsize(tmp_path / n) for n in ("a.txt", "b.txt"))
    assert max(sizes) > 10 * min(sizes)   # the small file's one part weighs less


def test_parquet_parts_weigh_their_row_groups(tmp_path):
    table = pa.table({"k": [f"key-{i % 7}" for i in range(20000)], "v": list(range(20000))})
    pq.write_table(table, tmp_path / "big.parquet", row_group_size=2000)
    pq.write_table(table.slice(0, 500), tmp_path / "small.parquet")
    source = ReadFromParquet(str(tmp_path / "*.parquet"), min_bundle_size=1)._source
    parts = source.split(4)
    sizes = {p: source.part_size(p) for p in parts}
    expected = 0
    for f in ("big.parquet", "small.parquet"):
        meta = pq.ParquetFile(tmp_path / f).metadata
        expected += sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    assert sum(sizes.values()) == expected
    small = [s for p, s in sizes.items() if p[0].endswith("small.parquet")]
    assert small and min(small) < max(sizes.values())


def test_a_sources_parts_weigh_alike_unless_it_says_otherwise():
    class Numbers(BoundedSource):
        def split(self, desired_parallelism):
            return [range(0, 10), range(10, 1000)]

        def read(self, part):
            return iter(part)

    source = Numbers()
    assert [source.part_size(p) for p in source.split(2)] == [1.0, 1.0]
