"""Transforms (Beam's `apache_beam.transforms`)."""

from headrace.transforms import combiners, ptransform, timeutil, trigger, userstate, window
from headrace.transforms.core import *  # noqa: F401,F403
from headrace.transforms.core import (
    CoGroupByKey, CombineGlobally, CombinePerKey, CombineValues, Create, Filter, FlatMap,
    FlatMapTuple, Flatten, FlattenWith, GroupByKey, Impulse, Keys, KvSwap, Map, MapTuple, ParDo,
    Partition, PartitionFn, Reshuffle, Values, WindowInto, WithKeys,
)
from headrace.transforms.util import (
    BatchElements, Distinct, GroupIntoBatches, LogElements, Regex, Reify, RemoveDuplicates, Tee, ToString,
)
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform, ptransform_fn
from headrace.model.combine import CombineFn

__all__ = ["BatchElements", "LogElements", "Regex", "Reify", "RemoveDuplicates", "Tee", "ToString",
           "CoGroupByKey", "CombineFn", "CombineGlobally", "CombinePerKey", "CombineValues",
           "Create", "Distinct", "DoFn", "Filter", "FlatMap", "FlatMapTuple", "Flatten",
           "FlattenWith", "GroupByKey", "GroupIntoBatches", "Impulse", "Keys", "KvSwap", "Map",
           "MapTuple", "PTransform", "ParDo", "Partition", "PartitionFn",
           "Reshuffle", "Values", "WindowInto", "WithKeys", "combiners", "ptransform",
           "ptransform_fn", "timeutil", "trigger", "userstate", "window"]
