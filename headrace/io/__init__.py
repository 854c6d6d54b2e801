"""Connectors (Beam's `apache_beam.io`): text, JSON lines and Parquet files, and Beam's
`PeriodicImpulse` (Beam: `apache_beam.transforms.periodicsequence`)."""

from headrace.io import filebasedsink, jsonio, parquetio, periodicsequence, textio
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.iobase import BoundedSource, Read, UnboundedSource
from headrace.io.jsonio import ReadFromJson, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.io.periodicsequence import PeriodicImpulse
from headrace.io.textio import ReadFromText, WriteToText

__all__ = ["BoundedSource", "FileBasedSink", "FileFormatWriter", "PeriodicImpulse", "Read",
           "ReadFromJson", "ReadFromParquet", "ReadFromParquetBatched", "ReadFromText",
           "UnboundedSource", "WriteToJson", "WriteToParquet", "WriteToText", "filebasedsink",
           "jsonio", "parquetio", "periodicsequence", "textio"]
