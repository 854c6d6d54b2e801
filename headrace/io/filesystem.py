"""Local files for the connectors: Beam's `CompressionTypes`, `FileMetadata`, `MatchResult` and
`BeamIOError`, compressed reading and writing, and glob matching.

`FileSystems` (headrace.io.filesystems) is the user-facing API over these; the connectors use
the helpers here directly.
"""

from __future__ import annotations

import bz2
import glob
import gzip
import io
import lzma
import os
import zlib
from typing import Any, BinaryIO, Dict, List, Optional

from headrace.errors import (
    HeadraceError, InvalidArgumentError, PipelineConstructionError, UnsupportedArgumentError,
)

__all__ = ["BeamIOError", "COMPRESSION_TYPES", "CompressionTypes", "FileMetadata", "MatchResult"]


class CompressionTypes:
    """Beam's compression types (plain strings): AUTO picks one from the file name's suffix."""

    AUTO = "auto"
    BZIP2 = "bzip2"
    DEFLATE = "deflate"
    GZIP = "gzip"
    ZSTD = "zstd"
    LZMA = "lzma"
    UNCOMPRESSED = "uncompressed"

    _SUFFIXES = {".bz2": BZIP2, ".deflate": DEFLATE, ".gz": GZIP, ".zst": ZSTD, ".zstd": ZSTD,
                 ".xz": LZMA, ".lzma": LZMA}
    _MIME_TYPES = {BZIP2: "application/x-bz2", DEFLATE: "application/x-deflate",
                   GZIP: "application/x-gzip", ZSTD: "application/zstd", LZMA: "application/lzma"}

    @classmethod
    def is_valid_compression_type(cls, compression_type: Any) -> bool:
        """Whether `compression_type` is one of the types above."""
        return compression_type in COMPRESSION_TYPES

    @classmethod
    def mime_type(cls, compression_type: str, default: str = "application/octet-stream") -> str:
        """The MIME type of files compressed with `compression_type` (`default` if none)."""
        return cls._MIME_TYPES.get(compression_type, default)

    @classmethod
    def detect_compression_type(cls, file_path: str) -> str:
        """The compression type of a file from its suffix (case-insensitive); UNCOMPRESSED if none."""
        lowered = file_path.lower()
        for suffix, kind in cls._SUFFIXES.items():
            if lowered.endswith(suffix):
                return kind
        return cls.UNCOMPRESSED


COMPRESSION_TYPES = ("auto", "uncompressed", "gzip", "bzip2", "deflate", "zstd", "lzma")


class FileMetadata:
    """A matched file: its path, size in bytes and last modification time (seconds since the epoch)."""

    def __init__(self, path: str, size_in_bytes: int, last_updated_in_seconds: float = 0.0) -> None:
        if not isinstance(path, str) or not path:
            raise InvalidArgumentError(f"FileMetadata needs a non-empty str path, got {path!r}")
        if isinstance(size_in_bytes, bool) or not isinstance(size_in_bytes, int) or size_in_bytes < 0:
            raise InvalidArgumentError(
                f"FileMetadata({path!r}): size_in_bytes must be an int >= 0, got {size_in_bytes!r}")
        self.path = path
        self.size_in_bytes = size_in_bytes
        self.last_updated_in_seconds = float(last_updated_in_seconds)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FileMetadata):
            return NotImplemented
        return (self.path, self.size_in_bytes, self.last_updated_in_seconds) == (
            other.path, other.size_in_bytes, other.last_updated_in_seconds)

    def __hash__(self) -> int:
        return hash((self.path, self.size_in_bytes, self.last_updated_in_seconds))

    def __repr__(self) -> str:
        if self.last_updated_in_seconds == 0.0:
            return f"FileMetadata({self.path}, {self.size_in_bytes})"
        return f"FileMetadata({self.path}, {self.size_in_bytes}, {self.last_updated_in_seconds})"


class MatchResult:
    """The files one pattern matched: `pattern` and `metadata_list` (FileMetadata, sorted by path)."""

    def __init__(self, pattern: str, metadata_list: List[FileMetadata]) -> None:
        self.pattern = pattern
        self.metadata_list = metadata_list

    def __repr__(self) -> str:
        return f"MatchResult({self.pattern!r}, {self.metadata_list!r})"


class BeamIOError(HeadraceError, IOError):
    """A file operation failed; `exception_details` maps each failed input to its exception."""

    def __init__(self, msg: str, exception_details: Optional[Dict[Any, BaseException]] = None) -> None:
        message = msg if exception_details is None else f"{msg} with exceptions {exception_details}"
        super().__init__(message)
        self.exception_details = exception_details


def check_compression_type(compression_type: Any) -> str:
    """Returns `compression_type` if it is one of COMPRESSION_TYPES, else raises InvalidArgumentError."""
    if compression_type not in COMPRESSION_TYPES:
        raise InvalidArgumentError(
            f"compression_type must be one of {', '.join(repr(c) for c in COMPRESSION_TYPES)} "
            f"(headrace.io.filesystem.CompressionTypes), got {compression_type!r}")
    return str(compression_type)


def compression_of(path: str, compression_type: str) -> Optional[str]:
    """The compression of `path` ('gzip', 'bzip2', 'deflate', 'zstd', 'lzma') or None; 'auto'
    looks at the suffix (.gz, .bz2, .deflate, .zst / .zstd, .xz / .lzma) as Beam does."""
    check_compression_type(compression_type)
    if compression_type == CompressionTypes.AUTO:
        compression_type = CompressionTypes.detect_compression_type(path)
    return None if compression_type == CompressionTypes.UNCOMPRESSED else compression_type


def _zstandard() -> Any:
    try:
        import zstandard  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        raise UnsupportedArgumentError(
            "zstd compression needs the zstandard package, which is not installed; install it "
            "(pip install zstandard) or use another compression_type (gzip, bzip2, lzma, "
            "deflate)") from None
    return zstandard


class _StreamReader(io.RawIOBase):
    """The decompressed bytes of a raw file through a zlib-style decompressor object; seeking
    goes forward by reading, backward by starting again from the beginning."""

    def __init__(self, raw: BinaryIO, new_decompressor: Any) -> None:
        self._raw = raw
        self._new = new_decompressor
        self._restart()

    def _restart(self) -> None:
        self._d = self._new()
        self._pending = b""
        self._eof = False
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._pos
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a decompressed stream seeks from its start or position")
        if offset < self._pos:
            self._raw.seek(0)
            self._restart()
        buf = bytearray(1 << 16)
        while self._pos < offset:
            n = self.readinto(memoryview(buf)[:min(len(buf), offset - self._pos)])
            if not n:
                break
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        while not self._pending and not self._eof:
            unused = getattr(self._d, "unused_data", b"")
            if unused and getattr(self._d, "eof", False):
                self._d = self._new()  # a concatenated stream follows
                data = unused
            else:
                data = self._raw.read(1 << 16)
            if not data:
                self._eof = True
                flush = getattr(self._d, "flush", None)
                self._pending = flush() if callable(flush) else b""
                break
            self._pending = self._d.decompress(data)
        n = min(len(view), len(self._pending))
        view[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        self._pos += n
        return n

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


class _StreamWriter(io.RawIOBase):
    """Compresses what is written with a zlib-style compressor object into a raw file."""

    def __init__(self, raw: BinaryIO, compressor: Any, close_raw: bool) -> None:
        self._raw = raw
        self._c = compressor
        self._close_raw = close_raw

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        out = self._c.compress(chunk)
        if out:
            self._raw.write(out)
        return len(chunk)

    def close(self) -> None:
        if not self.closed:
            self._raw.write(self._c.flush())
            if self._close_raw:
                self._raw.close()
            else:
                self._raw.flush()
        super().close()


def open_for_read(path: str, compression: Optional[str]) -> Any:
    """Opens `path` for reading bytes, decompressing with `compression` (see compression_of)."""
    if compression is None:
        return open(path, "rb")
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    if compression == "lzma":
        return lzma.open(path, "rb")
    if compression == "deflate":
        return io.BufferedReader(_StreamReader(open(path, "rb"), zlib.decompressobj))
    if compression == "zstd":
        zstd = _zstandard()
        return io.BufferedReader(_StreamReader(
            open(path, "rb"), lambda: zstd.ZstdDecompressor().decompressobj()))
    raise InvalidArgumentError(f"unknown compression {compression!r}")


def compressing_writer(raw: BinaryIO, compression: Optional[str], close_raw: bool = False) -> Any:
    """Wraps the open binary file `raw` so that what is written to it is compressed (or `raw`
    itself); closing the wrapper finishes the stream and closes `raw` only if `close_raw`."""
    if compression is None:
        return raw
    if compression == "gzip":
        out: Any = gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
    elif compression == "bzip2":
        out = bz2.BZ2File(raw, "wb")
    elif compression == "lzma":
        out = lzma.LZMAFile(raw, "wb")
    elif compression == "deflate":
        return io.BufferedWriter(_StreamWriter(raw, zlib.compressobj(), close_raw))
    elif compression == "zstd":
        return io.BufferedWriter(_StreamWriter(
            raw, _zstandard().ZstdCompressor().compressobj(), close_raw))
    else:
        raise InvalidArgumentError(f"unknown compression {compression!r}")
    return _Closing(out, raw) if close_raw else out


class _Closing:
    """A compressing file that also closes the raw file under it when closed."""

    def __init__(self, fh: Any, raw: BinaryIO) -> None:
        self._fh = fh
        self._raw = raw

    def close(self) -> None:
        """Finishes the compressed stream and closes the file."""
        try:
            self._fh.close()
        finally:
            self._raw.close()

    def __enter__(self) -> "_Closing":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fh, name)


def match_files(pattern: str) -> List[str]:
    """The regular files matching the glob `pattern`, sorted."""
    return sorted(f for f in glob.glob(pattern) if os.path.isfile(f))


def check_files_exist(transform: str, pattern: str, example: str) -> None:
    """Raises PipelineConstructionError naming `transform` if no file matches `pattern`."""
    if not match_files(pattern):
        raise PipelineConstructionError(
            f"{transform}: no files match {pattern!r}; check the path (glob patterns such as "
            f"{example!r} are allowed) or pass validate=False if the files are created later")
