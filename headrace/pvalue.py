"""Beam's `apache_beam.pvalue`: PCollection, tagged outputs and side-input views."""

from headrace.pipeline.pvalue import (
    AsDict, AsIter, AsList, AsMultiMap, AsSideInput, AsSingleton, DoOutputsTuple, PBegin,
    PCollection, PDone, PValue, TaggedOutput,
)

__all__ = ["AsDict", "AsIter", "AsList", "AsMultiMap", "AsSideInput", "AsSingleton",
           "DoOutputsTuple", "PBegin", "PCollection", "PDone", "PValue", "TaggedOutput"]
