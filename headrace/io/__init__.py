"""Connectors (Beam's `apache_beam.io`): text, JSON lines and Parquet files, text and JSON
lines read from a growing set of files (`ReadFromTextContinuously`, `ReadFromJsonContinuously`),
and Beam's `PeriodicImpulse` and `PeriodicSequence` (Beam: `apache_beam.transforms.periodicsequence`,
which is `headrace.transforms.periodicsequence` too)."""

from headrace.io import filebasedsink, jsonio, parquetio, periodicsequence, textio, watch
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.iobase import BoundedSource, Read, UnboundedSource
from headrace.io.jsonio import ReadFromJson, ReadFromJsonContinuously, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.io.periodicsequence import PeriodicImpulse, PeriodicSequence
from headrace.io.textio import ReadFromText, ReadFromTextContinuously, WriteToText

__all__ = ["BoundedSource", "FileBasedSink", "FileFormatWriter", "PeriodicImpulse",
           "PeriodicSequence", "Read", "ReadFromJson", "ReadFromJsonContinuously", "ReadFromParquet",
           "ReadFromParquetBatched",
           "ReadFromText", "ReadFromTextContinuously", "UnboundedSource", "WriteToJson",
           "WriteToParquet", "WriteToText", "filebasedsink", "jsonio", "parquetio",
           "periodicsequence", "textio", "watch"]
