"""Beam's `apache_beam.pvalue`: PCollection, tagged outputs, Row and side-input views."""

from headrace.pipeline.pvalue import (
    AsDict, AsIter, AsList, AsMultiMap, AsSideInput, AsSingleton, DoOutputsTuple, EmptySideInput,
    PBegin, PCollection, PDone, PValue, Row, TaggedOutput,
)

__all__ = ["AsDict", "AsIter", "AsList", "AsMultiMap", "AsSideInput", "AsSingleton",
           "DoOutputsTuple", "EmptySideInput", "PBegin", "PCollection", "PDone", "PValue", "Row",
           "TaggedOutput"]
