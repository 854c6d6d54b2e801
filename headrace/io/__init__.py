"""Connectors (Beam's `apache_beam.io`): text, JSON lines and Parquet files, text and JSON
lines read from a growing set of files (`ReadFromTextContinuously`, `ReadFromJsonContinuously`),
and Beam's `PeriodicImpulse` and `PeriodicSequence` (Beam: `apache_beam.transforms.periodicsequence`,
which is `headrace.transforms.periodicsequence` too), and Beam's `filesystems.FileSystems` over
local paths."""

from headrace.io import (
    filebasedsink, filesystem, filesystems, jsonio, localfilesystem, parquetio, periodicsequence,
    restriction_trackers, textio, watch, watermark_estimators,
)
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.filesystem import BeamIOError, CompressionTypes, FileMetadata, MatchResult
from headrace.io.filesystems import FileSystems
from headrace.io.iobase import (
    BoundedSource, Read, RestrictionProgress, RestrictionTracker, UnboundedSource, WatermarkEstimator,
)
from headrace.io.jsonio import ReadFromJson, ReadFromJsonContinuously, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.io.periodicsequence import PeriodicImpulse, PeriodicSequence
from headrace.io.textio import (
    ReadAllFromText, ReadFromText, ReadFromTextContinuously, ReadFromTextWithFilename, WriteToText,
)

__all__ = ["BeamIOError", "BoundedSource", "CompressionTypes", "FileBasedSink", "FileFormatWriter",
           "FileMetadata", "FileSystems", "MatchResult", "PeriodicImpulse", "PeriodicSequence",
           "Read", "ReadAllFromText", "RestrictionProgress", "RestrictionTracker", "ReadFromJson",
           "ReadFromJsonContinuously", "ReadFromParquet", "ReadFromParquetBatched", "ReadFromText",
           "ReadFromTextContinuously", "ReadFromTextWithFilename", "UnboundedSource",
           "WatermarkEstimator", "WriteToJson", "WriteToParquet",
           "WriteToText", "filebasedsink", "filesystem", "filesystems", "jsonio",
           "localfilesystem", "parquetio", "periodicsequence", "restriction_trackers", "textio",
           "watch", "watermark_estimators"]
