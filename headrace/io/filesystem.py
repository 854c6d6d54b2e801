"""Local files for the connectors: glob matching and Beam's compression types (auto, gzip, bzip2)."""

from __future__ import annotations

import bz2
import glob
import gzip
import os
from typing import Any, BinaryIO, List, Optional

from headrace.errors import InvalidArgumentError, PipelineConstructionError

COMPRESSION_TYPES = ("auto", "uncompressed", "gzip", "bzip2")


def check_compression_type(compression_type: Any) -> str:
    """Returns `compression_type` if it is one of COMPRESSION_TYPES, else raises InvalidArgumentError."""
    if compression_type not in COMPRESSION_TYPES:
        raise InvalidArgumentError(
            f"compression_type must be 'auto', 'uncompressed', 'gzip' or 'bzip2', got {compression_type!r}")
    return compression_type


def compression_of(path: str, compression_type: str) -> Optional[str]:
    """'gzip', 'bzip2' or None (no compression) for `path`; 'auto' looks at the .gz / .bz2 extension."""
    check_compression_type(compression_type)
    if compression_type == "auto":
        if path.endswith(".gz"):
            return "gzip"
        if path.endswith(".bz2"):
            return "bzip2"
        return None
    return None if compression_type == "uncompressed" else compression_type


def open_for_read(path: str, compression: Optional[str]) -> Any:
    """Opens `path` for reading bytes, decompressing with `compression` ('gzip', 'bzip2' or None)."""
    if compression == "gzip":
        return gzip.open(path, "rb")
    if compression == "bzip2":
        return bz2.open(path, "rb")
    return open(path, "rb")


def compressing_writer(raw: BinaryIO, compression: Optional[str]) -> Any:
    """Wraps the open binary file `raw` so that what is written to it is compressed (or `raw` itself)."""
    if compression == "gzip":
        return gzip.GzipFile(fileobj=raw, mode="wb", mtime=0)
    if compression == "bzip2":
        return bz2.BZ2File(raw, "wb")
    return raw


def match_files(pattern: str) -> List[str]:
    """The regular files matching the glob `pattern`, sorted."""
    return sorted(f for f in glob.glob(pattern) if os.path.isfile(f))


def check_files_exist(transform: str, pattern: str, example: str) -> None:
    """Raises PipelineConstructionError naming `transform` if no file matches `pattern`."""
    if not match_files(pattern):
        raise PipelineConstructionError(
            f"{transform}: no files match {pattern!r}; check the path (glob patterns such as "
            f"{example!r} are allowed) or pass validate=False if the files are created later")
