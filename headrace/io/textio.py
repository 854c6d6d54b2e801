"""Text files: `ReadFromText` (parallel byte-range splits) and `WriteToText` (temp files, atomic rename)."""

from __future__ import annotations

import bz2
import glob
import gzip
import os
import re
import shutil
import uuid
from typing import Any, Iterable, List, Optional, Tuple

from headrace.errors import InvalidArgumentError, PipelineConstructionError
from headrace.io.iobase import BoundedSource, Read
from headrace.model.time import MIN_TIMESTAMP_MICROS
from headrace.model.window import GLOBAL_WINDOWS_TUPLE, GlobalWindows
from headrace.model.windowed import WindowedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.pipeline.pvalue import AsList, PCollection
from headrace.transforms.core import Create, GroupByKey, ParDo, WindowInto

_SPLIT_BYTES = 64 * 1024 * 1024


def _compression(path: str, compression_type: str) -> Optional[str]:
    if compression_type not in ("auto", "uncompressed", "gzip", "bzip2"):
        raise InvalidArgumentError(
            f"compression_type must be 'auto', 'uncompressed', 'gzip' or 'bzip2', got {compression_type!r}")
    if compression_type == "auto":
        if path.endswith(".gz"):
            return "gzip"
        if path.endswith(".bz2"):
            return "bzip2"
        return None
    return None if compression_type == "uncompressed" else compression_type


def _open_read(path: str, compression: Optional[str]) -> Any:
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")


class _TextSource(BoundedSource):
    def __init__(self, pattern: str, strip_trailing_newlines: bool, skip_header_lines: int,
                 compression_type: str, validate: bool) -> None:
        self.pattern = pattern
        self.strip = strip_trailing_newlines
        self.skip = skip_header_lines
        self.compression_type = compression_type
        if validate and not self._files():
            raise PipelineConstructionError(
                f"ReadFromText: no files match {pattern!r}; check the path (glob patterns such as "
                "'data/*.txt' are allowed) or pass validate=False if the files are created later")

    def _files(self) -> List[str]:
        return sorted(f for f in glob.glob(self.pattern) if os.path.isfile(f))

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
            if _compression(f, self.compression_type) or self.skip or size <= target:
                parts.append((f, 0, -1))
                continue
            for start in range(0, size, target):
                parts.append((f, start, min(size, start + target)))
        return parts

    def read(self, part: Tuple[str, int, int]) -> Iterable[str]:
        path, start, end = part
        compression = _compression(path, self.compression_type)
        strip = self.strip
        with _open_read(path, compression) as fh:
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


def _shard_name(prefix: str, template: str, suffix: str, index: int, count: int) -> str:
    def repl(m: "re.Match[str]") -> str:
        s = m.group(0)
        return str(index if s[0] == "S" else count).zfill(len(s))
    return prefix + re.sub(r"S+|N+", repl, template) + suffix


def _encode_line(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return (value if isinstance(value, str) else str(value)).encode("utf-8")


class _FileWriter:
    def __init__(self, temp_dir: str, compression: Optional[str], header: Optional[str],
                 newline: bool) -> None:
        os.makedirs(temp_dir, exist_ok=True)
        self.path = os.path.join(temp_dir, f"{uuid.uuid4().hex}.tmp")
        raw = open(self.path, "wb")
        self.fh: Any = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) if compression == "gzip" else (
            bz2.BZ2File(raw, "wb") if compression == "bzip2" else raw)
        self._raw = raw
        self.newline = newline
        if header is not None:
            self.write(header)

    def write(self, value: Any) -> None:
        self.fh.write(_encode_line(value))
        if self.newline:
            self.fh.write(b"\n")

    def close(self, footer: Optional[str]) -> str:
        if footer is not None:
            self.write(footer)
        self.fh.close()
        if self._raw is not self.fh:
            self._raw.close()
        return self.path


class _WriteBundlesDoFn(DoFn):
    """Writes each bundle to its own temporary file and outputs the file's path."""

    def __init__(self, sink: "_TextSink") -> None:
        self.sink = sink
        self.writer: Optional[_FileWriter] = None

    def start_bundle(self) -> None:
        self.writer = None

    def process(self, element: Any) -> None:
        if self.writer is None:
            self.writer = self.sink.open_writer()
        self.writer.write(element)

    def finish_bundle(self) -> Iterable[WindowedValue]:
        if self.writer is not None:
            path = self.writer.close(self.sink.footer)
            self.writer = None
            yield WindowedValue(path, MIN_TIMESTAMP_MICROS, GLOBAL_WINDOWS_TUPLE)

    def teardown(self) -> None:
        if self.writer is not None:  # a failed attempt: its temp file is never committed
            try:
                self.writer.fh.close()
            except Exception:
                pass
            self.writer = None


class _WriteShardDoFn(DoFn):
    """Writes one shard's grouped elements to a temporary file and outputs its path."""

    def __init__(self, sink: "_TextSink") -> None:
        self.sink = sink

    def process(self, element: Any) -> Iterable[str]:
        _, values = element
        writer = self.sink.open_writer()
        for v in values:
            writer.write(v)
        yield writer.close(self.sink.footer)


class _FinalizeDoFn(DoFn):
    """Renames committed temporary files to their final shard names, then removes the temp dir."""

    def __init__(self, sink: "_TextSink") -> None:
        self.sink = sink

    def process(self, _: Any, temp_paths: List[str]) -> Iterable[str]:
        sink = self.sink
        paths = sorted(temp_paths)
        while len(paths) < max(1, sink.num_shards):  # empty shards still get their files
            paths.append(sink.open_writer().close(sink.footer))
        n = len(paths)
        finals = []
        for i, tmp in enumerate(paths):
            final = _shard_name(sink.prefix, sink.template, sink.suffix, i, n)
            os.makedirs(os.path.dirname(final) or ".", exist_ok=True)
            os.replace(tmp, final)
            finals.append(final)
        shutil.rmtree(sink.temp_dir, ignore_errors=True)
        return finals


class _TextSink:
    def __init__(self, prefix: str, suffix: str, template: str, compression_type: str,
                 header: Optional[str], footer: Optional[str], newline: bool) -> None:
        self.prefix, self.suffix, self.template = prefix, suffix, template
        self.compression = _compression(suffix or prefix, compression_type)
        self.header, self.footer, self.newline = header, footer, newline
        self.num_shards = 0
        base = os.path.dirname(os.path.abspath(prefix))
        self.temp_dir = os.path.join(base, f".headrace-temp-{uuid.uuid4().hex}")

    def open_writer(self) -> _FileWriter:
        return _FileWriter(self.temp_dir, self.compression, self.header, self.newline)


class WriteToText(PTransform):
    """Writes elements as lines to sharded files `prefix-SSSSS-of-NNNNN suffix`, exactly once.

    Every bundle (or shard) writes a temporary file; one finalize step renames the committed
    ones atomically, so a retried bundle never leaves duplicates or partial files. The output
    PCollection holds the final file names.
    """

    def __init__(self, file_path_prefix: str, file_name_suffix: str = "",
                 append_trailing_newlines: bool = True, num_shards: int = 0,
                 shard_name_template: Optional[str] = None, coder: Any = None,
                 compression_type: str = "auto", header: Optional[str] = None,
                 footer: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__()
        if not isinstance(file_path_prefix, (str, os.PathLike)) or not os.fspath(file_path_prefix):
            raise InvalidArgumentError(
                f"WriteToText needs a non-empty file path prefix, got {file_path_prefix!r}")
        if not isinstance(num_shards, int) or num_shards < 0:
            raise InvalidArgumentError(f"num_shards must be a non-negative int, got {num_shards!r}")
        if shard_name_template is None:
            shard_name_template = "-SSSSS-of-NNNNN"
        elif shard_name_template == "":
            num_shards = 1
        self.num_shards = num_shards
        self._sink = _TextSink(os.fspath(file_path_prefix), file_name_suffix, shard_name_template,
                               compression_type, header, footer, append_trailing_newlines)
        self._sink.num_shards = num_shards

    def default_label(self) -> str:
        return "WriteToText"

    def expand(self, pcoll: Any) -> PCollection:
        sink = self._sink
        glob_pc = pcoll | "WindowIntoGlobal" >> WindowInto(GlobalWindows())
        if self.num_shards:
            n = self.num_shards
            temp = (glob_pc
                    | "AssignShard" >> ParDo(_AssignShardDoFn(n))
                    | "GroupByShard" >> GroupByKey()
                    | "WriteShards" >> ParDo(_WriteShardDoFn(sink)))
        else:
            temp = glob_pc | "WriteBundles" >> ParDo(_WriteBundlesDoFn(sink))
        return (pcoll.pipeline
                | "FinalizeTrigger" >> Create([None])
                | "Finalize" >> ParDo(_FinalizeDoFn(sink), AsList(temp)))


class _AssignShardDoFn(DoFn):
    def __init__(self, n: int) -> None:
        self.n = n
        self.i = 0

    def start_bundle(self) -> None:
        import random
        self.i = random.randrange(self.n)

    def process(self, element: Any) -> Iterable[Tuple[int, Any]]:
        self.i = (self.i + 1) % self.n
        yield (self.i, element)
