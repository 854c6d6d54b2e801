"""Parquet files: `ReadFromParquet` / `ReadFromParquetBatched` (split by row groups),
`ReadAllFromParquet` / `ReadAllFromParquetBatched` (a PCollection of patterns, a splittable DoFn
over each file's row groups) and `WriteToParquet`."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from headrace.errors import DataFormatError, InvalidArgumentError, _short_repr
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter, write_files
from headrace.io.filesystem import check_files_exist, match_files
from headrace.io.iobase import ArrowBatchSource, BoundedSource, Read
from headrace.io.localfilesystem import local_pattern
from headrace.io.restriction_trackers import OffsetRange, OffsetRestrictionTracker
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.splittable import RestrictionProvider
from headrace.pipeline.pvalue import PCollection, Row

if TYPE_CHECKING:  # pyarrow is imported where it is used: `import headrace` does not need it
    import pyarrow as pa

__all__ = ["ReadAllFromParquet", "ReadAllFromParquetBatched", "ReadFromParquet",
           "ReadFromParquetBatched", "WriteToParquet"]

_SPLIT_BYTES = 64 * 1024 * 1024
#: The largest part a Read splits a Parquet source into, in row groups' encoded bytes. A part is
#: read whole, and its records are held until the part ends (whole-bundle retry), so this bounds
#: a reading task's memory whatever the input's size: 16 MB encoded is about 40-60 MB of Arrow
#: columns (dictionary-encoded strings expand). With 64 MB, a reading worker held about 750 MB
#: at 100 M events of `spark_windowed_sum`'s input against 360 MB at 10 M (benchmarks/README.md).
_PART_BYTES = 16 * 1024 * 1024
_BATCH_ROWS = 65536
_CODECS = ("none", "snappy", "gzip", "brotli", "lz4", "zstd")

Part = Tuple[str, Tuple[int, ...]]  # (file, row group indices)


class _ParquetSource(BoundedSource):
    """The row groups of the files matching a glob, consecutive groups of a file per part."""

    def __init__(self, transform: str, pattern: str, min_bundle_size: int, validate: bool,
                 columns: Optional[Sequence[str]]) -> None:
        if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
            raise InvalidArgumentError(
                f"{transform}: columns must be a list of column names, got {columns!r}")
        if not isinstance(min_bundle_size, int) or min_bundle_size < 0:
            raise InvalidArgumentError(f"min_bundle_size must be a non-negative int, got {min_bundle_size!r}")
        self.transform = transform
        self.pattern = pattern
        self.min_bundle_size = min_bundle_size
        self.columns = list(columns) if columns is not None else None
        self._part_bytes: Dict[Part, int] = {}   # each part of `split`: its row groups' bytes
        if validate:
            check_files_exist(transform, pattern, "data/*.parquet")

    def display_name(self) -> str:
        return f"parquet {self.pattern}"

    def split(self, desired_parallelism: int) -> List[Part]:
        import pyarrow.parquet as pq
        files = match_files(self.pattern)
        if not files:
            raise FileNotFoundError(f"no files match {self.pattern!r}")
        groups = []  # (file, [(row group, bytes)])
        for f in files:
            with pq.ParquetFile(f) as pf:
                meta = pf.metadata
            self._check_columns(f, meta.schema.to_arrow_schema().names)
            groups.append((f, [(i, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups)]))
        total = sum(size for _, rgs in groups for _, size in rgs)
        target = max(self.min_bundle_size, min(_PART_BYTES, total // max(1, desired_parallelism) + 1))
        parts: List[Part] = []
        for f, rgs in groups:
            acc: List[int] = []
            size = 0
            for i, rg_size in rgs:
                acc.append(i)
                size += rg_size
                if size >= target:
                    parts.append((f, tuple(acc)))
                    self._part_bytes[parts[-1]] = size
                    acc, size = [], 0
            if acc:
                parts.append((f, tuple(acc)))
                self._part_bytes[parts[-1]] = size
        return parts

    def part_size(self, part: Part) -> float:
        """A part's row groups' bytes (as the file's metadata gives them, when `split` made it)."""
        return float(self._part_bytes.get(part, 1.0))

    def _check_columns(self, path: str, names: List[str]) -> None:
        missing = [c for c in self.columns or () if c.split(".")[0] not in names]
        if missing:
            raise DataFormatError(
                f"{self.transform}: {path} has no column(s) {missing}; its columns are {names}. "
                "Fix columns=, or leave it out to read every column")


def _column_values(column: Any) -> list:
    """A column as a list of Python values (numpy's tolist is faster for null-free numbers)."""
    import pyarrow as pa
    t = column.type
    if column.null_count == 0 and (pa.types.is_integer(t) or pa.types.is_boolean(t)
                                   or pa.types.is_float32(t) or pa.types.is_float64(t)):
        return column.to_numpy(zero_copy_only=False).tolist()
    return column.to_pylist()


def _row_maker(names: List[str]) -> Callable[..., Dict[str, Any]]:
    """A function (v0, v1, ...) -> {names[0]: v0, names[1]: v1, ...}.

    It is compiled as one dict display with constant keys, which builds a row about 2.5 times
    faster than dict(zip(names, values)). The keys are embedded with repr() of str (Arrow field
    names are always str), so no name can inject code.
    """
    if not all(type(n) is str for n in names):
        raise TypeError(f"column names must be str, got {names!r}")
    args = ", ".join(f"_{i}" for i in range(len(names)))
    body = ", ".join(f"{n!r}: _{i}" for i, n in enumerate(names))
    return eval(f"lambda {args}: {{{body}}}", {})  # noqa: S307 (see the docstring)


def _rows_of(batch: Any, make_row: Callable[..., Dict[str, Any]]) -> Iterable[Dict[str, Any]]:
    if batch.num_columns == 0:
        return ({} for _ in range(batch.num_rows))
    return map(make_row, *[_column_values(c) for c in batch.columns])


def _records(batch: Any, makers: Dict[Tuple[str, ...], Callable[..., Dict[str, Any]]],
             as_rows: bool) -> List[Any]:
    """A record batch as dicts (or Rows), each made by the cached maker of its column names."""
    names = tuple(batch.schema.names)
    make_row = makers.get(names)
    if make_row is None:
        make_row = makers[names] = _row_maker(list(names))
    rows = _rows_of(batch, make_row)
    return [Row(**r) for r in rows] if as_rows else list(rows)


class _ParquetRowSource(_ParquetSource, ArrowBatchSource):
    """Rows of Parquet files as dicts or Rows; also an ArrowBatchSource (read_arrow, records_of)."""

    def __init__(self, *args: Any, as_rows: bool = False) -> None:
        super().__init__(*args)
        self.as_rows = as_rows
        self._makers: Dict[Tuple[str, ...], Callable[..., Dict[str, Any]]] = {}

    def read(self, part: Part) -> Iterable[Any]:
        for rows in self.read_batches(part, _BATCH_ROWS):
            yield from rows

    def read_batches(self, part: Part, size: int) -> Iterable[List[Any]]:
        for batch in self.read_arrow(part, size):
            yield self.records_of(batch)

    @property
    def row_attributes(self) -> bool:
        """True when records are `Row`s (fields read as attributes), False for dicts."""
        return self.as_rows

    def read_arrow(self, part: Part, size: int) -> Iterable[pa.RecordBatch]:
        """The part's rows as Arrow record batches of about `size` rows."""
        import pyarrow.parquet as pq
        path, row_groups = part
        with pq.ParquetFile(path) as pf:
            yield from pf.iter_batches(batch_size=size, row_groups=list(row_groups), columns=self.columns)

    def records_of(self, batch: pa.RecordBatch) -> List[Any]:
        """A record batch as the records this source yields (dicts, or Rows)."""
        return _records(batch, self._makers, self.as_rows)


class _ParquetTableSource(_ParquetSource):
    def read(self, part: Part) -> Iterable[pa.Table]:
        import pyarrow.parquet as pq
        path, row_groups = part
        with pq.ParquetFile(path) as pf:
            for i in row_groups:
                yield pf.read_row_group(i, columns=self.columns)


class ReadFromParquet(PTransform):
    """Reads Parquet files as one dict per row (column name -> Python value), row groups in parallel.

    `columns` reads only those columns; `as_rows=True` yields `beam.Row`s instead of dicts.
    """

    def __init__(self, file_pattern: Optional[str] = None, min_bundle_size: int = 0, validate: bool = True,
                 columns: Optional[Sequence[str]] = None, as_rows: bool = False) -> None:
        super().__init__()
        self._source = _ParquetRowSource("ReadFromParquet", _pattern("ReadFromParquet", file_pattern),
                                         min_bundle_size, validate, columns, as_rows=bool(as_rows))

    def default_label(self) -> str:
        return "ReadFromParquet"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source)


class ReadFromParquetBatched(PTransform):
    """Reads Parquet files as one `pyarrow.Table` per row group, row groups in parallel."""

    def __init__(self, file_pattern: Optional[str] = None, min_bundle_size: int = 0, validate: bool = True,
                 columns: Optional[Sequence[str]] = None) -> None:
        super().__init__()
        self._source = _ParquetTableSource("ReadFromParquetBatched",
                                           _pattern("ReadFromParquetBatched", file_pattern),
                                           min_bundle_size, validate, columns)

    def default_label(self) -> str:
        return "ReadFromParquetBatched"

    def expand(self, pbegin: Any) -> PCollection:
        import pyarrow as pa
        return pbegin | "Read" >> Read(self._source).with_output_types(pa.Table)


class _RowGroups(RestrictionProvider):
    """A Parquet file's restriction: the range of its row-group indexes, split into ranges of
    about `desired_bundle_size` bytes (never less than `min_bundle_size`), sized in bytes."""

    def __init__(self, desired_bundle_size: int, min_bundle_size: int) -> None:
        self.desired = max(1, desired_bundle_size, min_bundle_size)
        self._sizes: Dict[str, List[int]] = {}

    def sizes(self, path: str) -> List[int]:
        """The byte size of each row group of `path` (read from its footer once)."""
        sizes = self._sizes.get(path)
        if sizes is None:
            import pyarrow.parquet as pq
            with pq.ParquetFile(path) as pf:
                meta = pf.metadata
                sizes = [meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)]
            self._sizes[path] = sizes
        return sizes

    def initial_restriction(self, element: str) -> OffsetRange:
        return OffsetRange(0, len(self.sizes(element)))

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return OffsetRestrictionTracker(restriction)

    def split(self, element: str, restriction: OffsetRange) -> Iterable[OffsetRange]:
        sizes = self.sizes(element)
        start = acc = restriction.start
        acc = 0
        for i in range(restriction.start, restriction.stop):
            acc += sizes[i]
            if acc >= self.desired:
                yield OffsetRange(start, i + 1)
                start, acc = i + 1, 0
        if start < restriction.stop:
            yield OffsetRange(start, restriction.stop)

    def restriction_size(self, element: str, restriction: OffsetRange) -> float:
        return float(sum(self.sizes(element)[restriction.start:restriction.stop]))


class _ReadRowGroups(DoFn, RestrictionProvider):
    """A splittable DoFn over a Parquet file's row groups, its own RestrictionProvider (by its
    `_RowGroups`): per claimed group, its rows (dicts or Rows) or its `pyarrow.Table`, with the
    file name when asked."""

    def __init__(self, provider: _RowGroups, columns: Optional[Sequence[str]], batched: bool,
                 as_rows: bool, with_filename: bool) -> None:
        self.provider = provider
        self.columns = list(columns) if columns is not None else None
        self.batched = batched
        self.as_rows = as_rows
        self.with_filename = with_filename

    def setup(self) -> None:
        self._makers: Dict[Tuple[str, ...], Callable[..., Dict[str, Any]]] = {}

    def process(self, path: str, tracker: Any = DoFn.RestrictionParam()) -> Iterable[Any]:
        import pyarrow.parquet as pq
        r = tracker.current_restriction()
        with pq.ParquetFile(path) as pf:
            for group in range(r.start, r.stop):
                if not tracker.try_claim(group):
                    return
                if self.batched:
                    out: Iterable[Any] = [pf.read_row_group(group, columns=self.columns)]
                else:
                    out = (row for batch in pf.iter_batches(batch_size=_BATCH_ROWS, row_groups=[group],
                                                            columns=self.columns)
                           for row in self._rows(batch))
                for o in out:
                    yield (path, o) if self.with_filename else o

    def initial_restriction(self, element: str) -> OffsetRange:
        return self.provider.initial_restriction(element)

    def create_tracker(self, restriction: OffsetRange) -> OffsetRestrictionTracker:
        return self.provider.create_tracker(restriction)

    def split(self, element: str, restriction: OffsetRange) -> Iterable[OffsetRange]:
        return self.provider.split(element, restriction)

    def restriction_size(self, element: str, restriction: OffsetRange) -> float:
        return self.provider.restriction_size(element, restriction)

    def _rows(self, batch: Any) -> List[Any]:
        return _records(batch, self._makers, self.as_rows)


class ReadAllFromParquetBatched(PTransform):
    """Reads a PCollection of Parquet file patterns: one `pyarrow.Table` per row group, the row
    groups of each file read in parallel by a splittable DoFn (Beam's ReadAllFromParquetBatched)."""

    DEFAULT_DESIRED_BUNDLE_SIZE = _SPLIT_BYTES

    def __init__(self, min_bundle_size: int = 0,
                 desired_bundle_size: int = DEFAULT_DESIRED_BUNDLE_SIZE,
                 columns: Optional[Sequence[str]] = None, with_filename: bool = False,
                 label: str = "ReadAllFiles") -> None:
        super().__init__()
        self._fn = _read_row_groups(min_bundle_size, desired_bundle_size, columns, True, False,
                                    with_filename)
        self.label = label

    def expand(self, pcoll: Any) -> PCollection:
        return _read_all(pcoll, self._fn)


class ReadAllFromParquet(PTransform):
    """Reads a PCollection of Parquet file patterns: one dict (or Row) per row, the row groups
    of each file read in parallel by a splittable DoFn (Beam's ReadAllFromParquet)."""

    def __init__(self, with_filename: bool = False, min_bundle_size: int = 0,
                 desired_bundle_size: int = _SPLIT_BYTES, columns: Optional[Sequence[str]] = None,
                 as_rows: bool = False) -> None:
        super().__init__()
        self._fn = _read_row_groups(min_bundle_size, desired_bundle_size, columns, False,
                                    bool(as_rows), with_filename)

    def expand(self, pcoll: Any) -> PCollection:
        return _read_all(pcoll, self._fn)


def _read_row_groups(min_bundle_size: int, desired_bundle_size: int,
                     columns: Optional[Sequence[str]], batched: bool, as_rows: bool,
                     with_filename: bool) -> _ReadRowGroups:
    for name, value in (("min_bundle_size", min_bundle_size),
                        ("desired_bundle_size", desired_bundle_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidArgumentError(f"ReadAllFromParquet: {name} must be an int >= 0, got {value!r}")
    if columns is not None and (isinstance(columns, str)
                                or not all(isinstance(c, str) for c in columns)):
        raise InvalidArgumentError(
            f"ReadAllFromParquet: columns must be a list of column names, got {columns!r}")
    return _ReadRowGroups(_RowGroups(desired_bundle_size, min_bundle_size), columns, batched,
                                as_rows, with_filename)


def _read_all(pcoll: Any, fn: DoFn) -> PCollection:
    from headrace.transforms.core import FlatMap, ParDo

    def files(pattern: str) -> List[str]:
        found = match_files(local_pattern("ReadAllFromParquet", os.fspath(pattern)))
        if not found:
            raise FileNotFoundError(f"no files match {pattern!r}")
        return found
    return pcoll | "Match" >> FlatMap(files) | "ReadRowGroups" >> ParDo(fn)


def _pattern(transform: str, file_pattern: Any) -> str:
    if not isinstance(file_pattern, (str, os.PathLike)) or not os.fspath(file_pattern):
        raise InvalidArgumentError(f"{transform} needs a file pattern str, got {file_pattern!r}")
    return local_pattern(transform, os.fspath(file_pattern))


# ---------------------------------------------------------------------------------------


class _ParquetWriter(FileFormatWriter):
    """Buffers rows into record batches of `record_batch_size` rows, and record batches into
    row groups of about `row_group_buffer_size` bytes (as Beam's ParquetSink does)."""

    def __init__(self, fh: BinaryIO, sink: "_ParquetSink") -> None:
        import pyarrow.parquet as pq
        super().__init__(fh)
        self.sink = sink
        self.writer = pq.ParquetWriter(
            fh, sink.schema, compression=sink.codec,
            use_deprecated_int96_timestamps=sink.use_deprecated_int96_timestamps,
            use_compliant_nested_type=sink.use_compliant_nested_type)
        self.rows: List[Any] = []
        self.batches: List[pa.RecordBatch] = []
        self.nbytes = 0

    def write(self, record: Any) -> None:
        rows = self.rows
        rows.append(record)
        if len(rows) >= self.sink.record_batch_size:
            self._flush_rows()

    def _flush_rows(self) -> None:
        batch = self.sink.to_record_batch(self.rows)
        self.rows = []
        self.batches.append(batch)
        self.nbytes += batch.nbytes
        if self.nbytes >= self.sink.row_group_buffer_size:
            self._write_row_group()

    def _write_row_group(self) -> None:
        import pyarrow as pa
        table = pa.Table.from_batches(self.batches, schema=self.sink.schema)
        self.batches, self.nbytes = [], 0
        self.writer.write_table(table, row_group_size=max(1, table.num_rows))

    def abandon(self) -> None:
        self.writer.close()

    def finish(self) -> None:
        if self.rows:
            self._flush_rows()
        if self.batches:
            self._write_row_group()
        self.writer.close()


class _ParquetSink(FileBasedSink):
    def __init__(self, schema: pa.Schema, row_group_buffer_size: int, record_batch_size: int, codec: str,
                 use_deprecated_int96_timestamps: bool, use_compliant_nested_type: bool,
                 file_path_prefix: Any, file_name_suffix: str, num_shards: int,
                 shard_name_template: Optional[str]) -> None:
        # the codec compresses inside the file, so the file itself is never compressed
        super().__init__("WriteToParquet", file_path_prefix, file_name_suffix, num_shards,
                         shard_name_template, compression_type="uncompressed")
        self.schema = schema
        self.names = schema.names
        self.row_group_buffer_size = row_group_buffer_size
        self.record_batch_size = record_batch_size
        self.codec = codec
        self.use_deprecated_int96_timestamps = use_deprecated_int96_timestamps
        self.use_compliant_nested_type = use_compliant_nested_type

    def new_writer(self, fh: BinaryIO) -> _ParquetWriter:
        return _ParquetWriter(fh, self)

    def to_record_batch(self, rows: List[Any]) -> pa.RecordBatch:
        """The rows (dicts) as a record batch of the schema; a row that does not fit is named."""
        import pyarrow as pa
        try:
            columns = [[r[n] for r in rows] for n in self.names]
        except (KeyError, TypeError, IndexError):
            raise self._bad_row(rows) from None
        arrays = []
        for field, values in zip(self.schema, columns):
            try:
                arr = pa.array(values, type=field.type)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                raise self._bad_value(field, values, rows) from None
            if not field.nullable and arr.null_count:
                raise self._bad_value(field, values, rows) from None
            arrays.append(arr)
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _schema_text(self) -> str:
        return ", ".join(f"{f.name}: {f.type}" for f in self.schema)

    def _bad_row(self, rows: List[Any]) -> DataFormatError:
        for r in rows:
            if not hasattr(r, "keys") or not hasattr(r, "__getitem__"):
                return DataFormatError(
                    f"step {self.step!r} writes dicts (column name -> value) as Parquet rows, got "
                    f"{_short_repr(r)} ({type(r).__name__}); map each element to a dict with the "
                    f"schema's fields ({self._schema_text()}) before the write")
            missing = [n for n in self.names if n not in r]
            if missing:
                return DataFormatError(
                    f"step {self.step!r}: row {_short_repr(r)} has no field {missing[0]!r} of the schema "
                    f"({self._schema_text()}); give every row every schema field (None for a missing "
                    f"value of a nullable field), e.g. beam.Map(lambda r: {{**r, {missing[0]!r}: None}}) "
                    "before the write, or remove the field from the schema")
        return DataFormatError(f"step {self.step!r}: rows do not fit the schema ({self._schema_text()})")

    def _bad_value(self, field: pa.Field, values: List[Any], rows: List[Any]) -> DataFormatError:
        import pyarrow as pa
        for i, v in enumerate(values):
            if v is None:
                if field.nullable:
                    continue
                problem = "is None, but the field is not nullable"
            else:
                try:
                    pa.array([v], type=field.type)
                    continue
                except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
                    problem = (f"is {_short_repr(v, 80)} ({type(v).__name__}), which is not a "
                               f"{field.type}: {exc}")
            return DataFormatError(
                f"step {self.step!r}: field {field.name!r} of row {_short_repr(rows[i])} {problem}. Convert "
                f"the value before the write (e.g. with beam.Map) or change the schema's field to fit it")
        return DataFormatError(f"step {self.step!r}: field {field.name!r} does not fit {field.type}")


class WriteToParquet(PTransform):
    """Writes dict rows to sharded Parquet files of the given `pyarrow.Schema`, exactly once.

    `mime_type` is the content type Beam gives files on object stores; local files have none,
    so, as with Beam's local file system, it is checked (a str) and not stored anywhere.
    """

    def __init__(self, file_path_prefix: str, schema: Optional[pa.Schema] = None,
                 row_group_buffer_size: int = 64 * 1024 * 1024, record_batch_size: int = 1000,
                 codec: str = "none", use_deprecated_int96_timestamps: bool = False,
                 use_compliant_nested_type: bool = False, file_name_suffix: str = "",
                 num_shards: int = 0, shard_name_template: Optional[str] = None,
                 mime_type: str = "application/x-parquet") -> None:
        import pyarrow as pa
        super().__init__()
        if not isinstance(mime_type, str):
            raise InvalidArgumentError(f"WriteToParquet(mime_type=...) must be a str, got {mime_type!r}")
        if not isinstance(schema, pa.Schema):
            raise InvalidArgumentError(
                f"WriteToParquet needs schema=pyarrow.Schema, got {schema!r}; build one with "
                "pyarrow.schema([('name', pyarrow.string()), ('count', pyarrow.int64())])")
        for name, value in (("row_group_buffer_size", row_group_buffer_size),
                            ("record_batch_size", record_batch_size)):
            if not isinstance(value, int) or value < 1:
                raise InvalidArgumentError(f"{name} must be a positive int, got {value!r}")
        if not isinstance(codec, str) or codec.lower() not in _CODECS or (
                codec.lower() != "none" and not pa.Codec.is_available(codec.lower())):
            raise InvalidArgumentError(f"codec must be one of {', '.join(_CODECS)} (and available in "
                                       f"this pyarrow), got {codec!r}")
        self._sink = _ParquetSink(schema, row_group_buffer_size, record_batch_size, codec.lower(),
                                  use_deprecated_int96_timestamps, use_compliant_nested_type,
                                  file_path_prefix, file_name_suffix, num_shards, shard_name_template)

    def default_label(self) -> str:
        return "WriteToParquet"

    def expand(self, pcoll: Any) -> PCollection:
        return write_files(pcoll, self._sink)

