"""headrace: the Dataflow Model in Python, with Beam's API, on Apache Spark.

`import headrace as beam` gives Beam's core names: Pipeline, Create, Map, ParDo, GroupByKey,
CombinePerKey, WindowInto, ... and the modules `window`, `combiners`, `pvalue`, `io`,
`metrics`, `options`, `testing`, `coders`, `typehints`.
"""

import sys as _sys

from headrace import coders, combiners, io, metrics, pvalue, transforms, typehints, window  # noqa: F401
from headrace.errors import HeadraceError
from headrace.io import ReadFromText, WriteToText
from headrace.metrics import Metrics
from headrace.model.combine import CombineFn
from headrace.model.strategy import TimestampCombiner
from headrace.model.windowed import TimestampedValue, PaneInfo, PaneInfoTiming
from headrace.options.pipeline_options import PipelineOptions
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.pipeline import Pipeline, PipelineResult, PipelineState
from headrace.pipeline.ptransform import PTransform, ptransform_fn
from headrace.pipeline.pvalue import PCollection, Row, TaggedOutput
from headrace.transforms.core import (
    CoGroupByKey, CombineGlobally, CombinePerKey, CombineValues, Create, Filter, FlatMap,
    FlatMapTuple, Flatten, FlattenWith, GroupByKey, Impulse, Keys, KvSwap, Map, MapTuple, ParDo,
    Partition, PartitionFn, Reshuffle, RestrictionProvider, Values, WatermarkEstimatorProvider,
    WindowInto, WithKeys,
)
from headrace.transforms.util import (
    BatchElements, Distinct, GroupIntoBatches, LogElements, Regex, Reify, RemoveDuplicates, Tee,
    ToString,
)
from headrace.model.strategy import Windowing
from headrace.pipeline.userstate import TimeDomain
from headrace.io.iobase import Read
from headrace.runners.local import LocalRunner

# Beam's `apache_beam.transforms.periodicsequence` lives in `io` here (it is a source, and
# `transforms` cannot import `io`): make it importable under Beam's path too.
_sys.modules["headrace.transforms.periodicsequence"] = io.periodicsequence
setattr(transforms, "periodicsequence", io.periodicsequence)

__version__ = "0.1.0"

__all__ = [
    "BatchElements", "LogElements", "Regex", "Reify", "Tee", "ToString",
    "CoGroupByKey", "CombineFn", "CombineGlobally", "CombinePerKey", "CombineValues", "Create",
    "Distinct", "DoFn", "Filter", "FlatMap", "FlatMapTuple", "Flatten", "FlattenWith", "GroupByKey",
    "GroupIntoBatches", "HeadraceError", "Impulse", "Keys", "KvSwap", "LocalRunner", "Map",
    "MapTuple", "Metrics", "PCollection",
    "PTransform", "PaneInfo", "PaneInfoTiming", "ParDo", "Partition", "PartitionFn", "Pipeline",
    "PipelineOptions", "PipelineResult", "PipelineState", "Read", "ReadFromText", "RemoveDuplicates",
    "Reshuffle", "RestrictionProvider", "Row", "TaggedOutput", "TimeDomain", "TimestampCombiner",
    "TimestampedValue", "Values", "WatermarkEstimatorProvider",
    "WindowInto", "Windowing", "WithKeys", "WriteToText", "coders", "combiners", "io", "metrics",
    "ptransform_fn", "pvalue", "transforms", "typehints", "window",
]
