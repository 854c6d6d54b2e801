"""Text files: `ReadFromText` (parallel byte-range splits) and `WriteToText` (temp files, atomic rename)."""

from __future__ import annotations

import os
from typing import Any, BinaryIO, Iterable, List, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter, write_files
from headrace.io.filesystem import (
    check_compression_type, check_files_exist, compression_of, match_files, open_for_read,
)
from headrace.io.iobase import BoundedSource, Read
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import PCollection

_SPLIT_BYTES = 64 * 1024 * 1024


class _TextSource(BoundedSource):
    """Lines of the files matching a glob, split into byte ranges (whole files if compressed)."""

    transform = "ReadFromText"

    def __init__(self, pattern: str, strip_trailing_newlines: bool, skip_header_lines: int,
                 compression_type: str, validate: bool) -> None:
        self.pattern = pattern
        self.strip = strip_trailing_newlines
        self.skip = skip_header_lines
        self.compression_type = check_compression_type(compression_type)
        if validate:
            check_files_exist(self.transform, pattern, "data/*.txt")

    def _files(self) -> List[str]:
        return match_files(self.pattern)

    def display_name(self) -> str:
        return f"text {self.pattern}"

    def split(self, desired_parallelism: int) -> List[Tuple[str, int, int]]:
        files = self._files()
        if not files:
            raise FileNotFoundError(f"no files match {self.pattern!r}")
        total = sum(os.path.getsize(f) for f in files)
        target = max(1024 * 1024, min(_SPLIT_BYTES, total // max(1, desired_parallelism) + 1))
        parts: List[Tuple[str, int, int]] = []
        for f in files:
            size = os.path.getsize(f)
            if compression_of(f, self.compression_type) or self.skip or size <= target:
                parts.append((f, 0, -1))
                continue
            for start in range(0, size, target):
                parts.append((f, start, min(size, start + target)))
        return parts

    def read(self, part: Tuple[str, int, int]) -> Iterable[str]:
        path, start, end = part
        compression = compression_of(path, self.compression_type)
        strip = self.strip
        with open_for_read(path, compression) as fh:
            pos = start
            if start > 0:
                fh.seek(start - 1)
                skipped = fh.readline()  # finish the line that straddles the split start
                pos = start - 1 + len(skipped)
            skip = self.skip if start == 0 else 0
            while end < 0 or pos < end:
                raw = fh.readline()
                if not raw:
                    break
                pos += len(raw)
                if skip:
                    skip -= 1
                    continue
                line = raw.decode("utf-8")
                if strip:
                    if line.endswith("\n"):
                        line = line[:-2] if line.endswith("\r\n") else line[:-1]
                yield line


class ReadFromText(PTransform):
    """Reads lines of the files matching `file_pattern` (split by byte ranges, read in parallel)."""

    def __init__(self, file_pattern: str, min_bundle_size: int = 0, compression_type: str = "auto",
                 strip_trailing_newlines: bool = True, coder: Any = None, validate: bool = True,
                 skip_header_lines: int = 0, **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(file_pattern, (str, os.PathLike)):
            raise InvalidArgumentError(f"ReadFromText needs a file pattern str, got {file_pattern!r}")
        if not isinstance(skip_header_lines, int) or skip_header_lines < 0:
            raise InvalidArgumentError(
                f"skip_header_lines must be a non-negative int, got {skip_header_lines!r}")
        self._source = _TextSource(os.fspath(file_pattern), strip_trailing_newlines,
                                   skip_header_lines, compression_type, validate)

    def default_label(self) -> str:
        return "ReadFromText"

    def expand(self, pbegin: Any) -> PCollection:
        return pbegin | "Read" >> Read(self._source).with_output_types(str)


# ---------------------------------------------------------------------------------------


def _encode_line(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else str(value)).encode("utf-8")


class _TextWriter(FileFormatWriter):
    """Each record as a line (str, bytes, or str(value)), with an optional header and footer."""

    def __init__(self, fh: BinaryIO, sink: "_TextSink") -> None:
        super().__init__(fh)
        self.footer = sink.footer
        self.end = b"\n" if sink.newline else b""
        if sink.header is not None:
            self.write(sink.header)

    def write(self, record: Any) -> None:
        self.fh.write(_encode_line(record) + self.end)

    def finish(self) -> None:
        if self.footer is not None:
            self.write(self.footer)


class _TextSink(FileBasedSink):
    def __init__(self, header: Optional[str], footer: Optional[str], newline: bool,
                 *args: Any, **kwargs: Any) -> None:
        super().__init__("WriteToText", *args, **kwargs)
        self.header, self.footer, self.newline = header, footer, newline

    def new_writer(self, fh: BinaryIO) -> _TextWriter:
        return _TextWriter(fh, self)


class WriteToText(PTransform):
    """Writes elements as lines to sharded files `prefix-SSSSS-of-NNNNN suffix`, exactly once.

    Every bundle (or shard) writes a temporary file; one finalize step renames the committed
    ones atomically, so a retried bundle never leaves duplicates or partial files, and removes
    an earlier run's shards that the new ones did not replace (see `filebasedsink`). The output
    PCollection holds the final file names.
    """

    def __init__(self, file_path_prefix: str, file_name_suffix: str = "",
                 append_trailing_newlines: bool = True, num_shards: int = 0,
                 shard_name_template: Optional[str] = None, coder: Any = None,
                 compression_type: str = "auto", header: Optional[str] = None,
                 footer: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__()
        self._sink = _TextSink(header, footer, append_trailing_newlines, file_path_prefix,
                               file_name_suffix, num_shards, shard_name_template, compression_type)
        self.num_shards = self._sink.num_shards

    def default_label(self) -> str:
        return "WriteToText"

    def expand(self, pcoll: Any) -> PCollection:
        return write_files(pcoll, self._sink)
