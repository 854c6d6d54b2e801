"""JSON lines: `ReadFromJson` (ReadFromText's byte-range splits, one value per line) and `WriteToJson`."""

from __future__ import annotations

import json
import os
from typing import Any, BinaryIO, Iterable, List, Optional, Tuple

from headrace.errors import DataFormatError, InvalidArgumentError, _short_repr
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter, write_files
from headrace.io.filesystem import compression_of, open_for_read
from headrace.io.iobase import Read
from headrace.io.localfilesystem import local_pattern
from headrace.io.textio import _TextSource
from headrace.io.watch import SKIP, GrowingFilesSource
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PCollection

__all__ = ["ReadFromJson", "ReadFromJsonContinuously", "WriteToJson"]


class _JsonSource(_TextSource):
    """One JSON value per line (split like text), or with lines=False one document per file."""

    transform = "ReadFromJson"

    def __init__(self, pattern: str, lines: bool, compression_type: str, validate: bool,
                 skip_header_lines: int = 0, delimiter: Optional[bytes] = None,
                 escapechar: Optional[bytes] = None) -> None:
        super().__init__(pattern, True, skip_header_lines, compression_type, validate,
                         delimiter=delimiter, escapechar=escapechar)
        if not lines:
            given = [name for name, value in (("skip_header_lines", skip_header_lines),
                                              ("delimiter", delimiter), ("escapechar", escapechar))
                     if value]
            if given:
                raise InvalidArgumentError(
                    f"ReadFromJson(lines=False) reads each file as one JSON document, so "
                    f"{', '.join(given)} (which split JSON lines) cannot apply; drop "
                    f"{'it' if len(given) == 1 else 'them'} or read JSON lines (lines=True)")
        self.lines = lines

    def display_name(self) -> str:
        return f"json {self.pattern}"

    def split(self, desired_parallelism: int) -> List[Tuple[str, int, int]]:
        if self.lines:
            return super().split(desired_parallelism)
        files = self._files()
        if not files:
            raise FileNotFoundError(f"no files match {self.pattern!r}")
        return [(f, 0, -1) for f in files]

    def read(self, part: Tuple[str, int, int]) -> Iterable[Any]:
        if not self.lines:
            yield from self._read_document(part[0])
            return
        loads = json.loads
        for k, line in enumerate(super().read(part)):
            try:
                value = loads(line)
            except ValueError as exc:
                if not line.strip():  # blank lines hold no value
                    continue
                raise self._bad_line(part, k, line, exc) from None
            yield value

    def _bad_line(self, part: Tuple[str, int, int], k: int, line: str, exc: ValueError
                  ) -> DataFormatError:
        path = part[0]
        where = f" at column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
        reason = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
        return DataFormatError(
            f"ReadFromJson: {path} line {self.line_number(part, k)} is not valid JSON ({reason}"
            f"{where}): {_short_repr(line, 120)}. Each line must hold exactly one JSON value (JSON "
            "Lines); fix or remove that line, or pass lines=False if each file holds a single JSON "
            "document")

    def _read_document(self, path: str) -> Iterable[Any]:
        with open_for_read(path, compression_of(path, self.compression_type)) as fh:
            text = fh.read().decode("utf-8")
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DataFormatError(
                f"ReadFromJson: {path} is not a JSON document ({exc.msg} at line {exc.lineno} "
                f"column {exc.colno}); fix the file, or pass lines=True (the default) if it holds "
                "one JSON value per line") from None
        if isinstance(doc, list):
            yield from doc
        else:
            yield doc


class ReadFromJson(PTransform):
    """Reads JSON lines files (one `json.loads` value per line), split by byte ranges in parallel.

    With `lines=False` each file is one JSON document: an array yields its items, any other
    value is yielded whole. Blank lines are skipped; a malformed line fails the read with an
    error naming the file and the line number. `compression_type`, `skip_header_lines`,
    `delimiter` (bytes ending each value instead of a newline) and `escapechar` mean what they
    mean for ReadFromText.
    """

    def __init__(self, file_pattern: str, lines: bool = True, validate: bool = True,
                 compression_type: str = "auto", skip_header_lines: int = 0,
                 delimiter: Optional[bytes] = None, escapechar: Optional[bytes] = None) -> None:
        super().__init__()
        if not isinstance(file_pattern, (str, os.PathLike)):
            raise InvalidArgumentError(f"ReadFromJson needs a file pattern str, got {file_pattern!r}")
        self._source = _JsonSource(local_pattern("ReadFromJson", os.fspath(file_pattern)),
                                   bool(lines), compression_type, validate, skip_header_lines,
                                   delimiter, escapechar)

    def default_label(self) -> str:
        return "ReadFromJson"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source)


class ReadFromJsonContinuously(PTransform):
    """Reads the JSON lines of the files matching `file_pattern` (one `json.loads` value per
    line, blank lines skipped) and keeps watching it, as `ReadFromTextContinuously` reads lines:
    new files and appended lines are read as they appear; `timestamp_fn` gets the parsed value."""

    def __init__(self, file_pattern: str, poll_interval: float = 1.0,
                 timestamp_fn: Optional[Any] = None, watermark_delay: float = 0.0,
                 stop_timestamp: Any = None, stop_after_idle: Optional[float] = None,
                 max_files_per_read: Optional[int] = None, label: Optional[str] = None) -> None:
        super().__init__(label)
        self._source = GrowingFilesSource(
            file_pattern, _json_line, "ReadFromJsonContinuously", poll_interval, timestamp_fn,
            watermark_delay, stop_timestamp, stop_after_idle, max_files_per_read)

    def default_label(self) -> str:
        return "ReadFromJsonContinuously"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source)


def _json_line(text: str, path: str, line_no: int) -> Any:
    if not text.strip():
        return SKIP
    try:
        return json.loads(text)
    except ValueError as exc:
        raise DataFormatError(f"ReadFromJsonContinuously: {path} line {line_no} is not JSON: "
                              f"{exc}: {_short_repr(text)}") from None


class _JsonLinesWriter(FileFormatWriter):
    def __init__(self, fh: BinaryIO, step: str) -> None:
        super().__init__(fh)
        self.step = step
        self.dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=False).encode

    def write(self, record: Any) -> None:
        try:
            text = self.dumps(record)
        except (TypeError, ValueError) as exc:
            raise DataFormatError(
                f"step {self.step!r} cannot write {_short_repr(record)} as JSON: {exc}. Elements must "
                "be JSON values (dict, list, str, int, float, bool, None); convert others first, e.g. "
                "beam.Map(lambda r: {**r, 'when': r['when'].isoformat()}) for a datetime") from None
        self.fh.write(text.encode("utf-8") + b"\n")


class _JsonSink(FileBasedSink):
    def new_writer(self, fh: BinaryIO) -> _JsonLinesWriter:
        return _JsonLinesWriter(fh, self.step)


class WriteToJson(PTransform):
    """Writes elements as JSON lines (one `json.dumps` object per line) to sharded files, exactly once."""

    def __init__(self, file_path_prefix: str, file_name_suffix: str = ".json", num_shards: int = 0,
                 shard_name_template: Optional[str] = None, compression_type: str = "auto") -> None:
        super().__init__()
        self._sink = _JsonSink("WriteToJson", file_path_prefix, file_name_suffix, num_shards,
                               shard_name_template, compression_type)

    def default_label(self) -> str:
        return "WriteToJson"

    def expand(self, pcoll: Any) -> PCollection:
        return write_files(pcoll, self._sink)
