"""Connectors (Beam's `apache_beam.io`): text, JSON lines and Parquet files, text and JSON
lines read from a growing set of files (`ReadFromTextContinuously`, `ReadFromJsonContinuously`),
and Beam's `PeriodicImpulse` (Beam: `apache_beam.transforms.periodicsequence`)."""

from headrace.io import filebasedsink, jsonio, parquetio, periodicsequence, textio, watch
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.iobase import BoundedSource, Read, UnboundedSource
from headrace.io.jsonio import ReadFromJson, ReadFromJsonContinuously, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.io.periodicsequence import PeriodicImpulse
from headrace.io.textio import ReadFromText, ReadFromTextContinuously, WriteToText

__all__ = ["BoundedSource", "FileBasedSink", "FileFormatWriter", "PeriodicImpulse", "Read",
           "ReadFromJson", "ReadFromJsonContinuously", "ReadFromParquet", "ReadFromParquetBatched",
           "ReadFromText", "ReadFromTextContinuously", "UnboundedSource", "WriteToJson",
           "WriteToParquet", "WriteToText", "filebasedsink", "jsonio", "parquetio",
           "periodicsequence", "textio", "watch"]
