"""Connectors (Beam's `apache_beam.io`): text, JSON lines and Parquet files."""

from headrace.io import filebasedsink, jsonio, parquetio, textio
from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.iobase import BoundedSource, Read
from headrace.io.jsonio import ReadFromJson, WriteToJson
from headrace.io.parquetio import ReadFromParquet, ReadFromParquetBatched, WriteToParquet
from headrace.io.textio import ReadFromText, WriteToText

__all__ = ["BoundedSource", "FileBasedSink", "FileFormatWriter", "Read", "ReadFromJson",
           "ReadFromParquet", "ReadFromParquetBatched", "ReadFromText", "WriteToJson",
           "WriteToParquet", "WriteToText", "filebasedsink", "jsonio", "parquetio", "textio"]
