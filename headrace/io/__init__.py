"""Connectors (Beam's `apache_beam.io`)."""

from headrace.io import textio
from headrace.io.iobase import BoundedSource, Read
from headrace.io.textio import ReadFromText, WriteToText

__all__ = ["BoundedSource", "Read", "ReadFromText", "WriteToText", "textio"]
