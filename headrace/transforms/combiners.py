"""Composite combiners in Beam's shape: Count, Mean, Top, ToList, ToDict, ToSet, Latest, Sample-free."""

from __future__ import annotations

from typing import Any, Callable, Optional

from headrace.model.combine import (
    CountCombineFn, LatestCombineFn, MeanCombineFn, SingleInputTupleCombineFn, ToDictCombineFn,
    ToListCombineFn, ToSetCombineFn, TopCombineFn,
)
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.transforms.core import KV_TYPE, CombineGlobally, CombinePerKey, Map

__all__ = ["Count", "Mean", "Top", "ToList", "ToDict", "ToSet", "Latest", "CountCombineFn",
           "MeanCombineFn", "TopCombineFn", "ToListCombineFn", "ToDictCombineFn", "ToSetCombineFn",
           "LatestCombineFn", "SingleInputTupleCombineFn"]


class Count:
    """Counting combiners: `Count.Globally()`, `Count.PerKey()`, `Count.PerElement()`."""

    @staticmethod
    def Globally() -> PTransform:
        """The number of elements (per window)."""
        return CombineGlobally(CountCombineFn())

    @staticmethod
    def PerKey() -> PTransform:
        """The number of values of each key."""
        return CombinePerKey(CountCombineFn())

    class PerElement(PTransform):
        """(element, number of occurrences) for each distinct element."""

        def expand(self, pcoll: Any) -> Any:
            return (pcoll
                    | "PairWithVoid" >> Map(_pair_with_none).with_output_types(KV_TYPE)
                    | "CombinePerKey" >> CombinePerKey(CountCombineFn()))


def _pair_with_none(x: Any) -> Any:
    return (x, None)


class Mean:
    """Mean combiners: `Mean.Globally()`, `Mean.PerKey()`."""

    @staticmethod
    def Globally() -> PTransform:
        """The mean of all elements (per window)."""
        return CombineGlobally(MeanCombineFn())

    @staticmethod
    def PerKey() -> PTransform:
        """The mean of each key's values."""
        return CombinePerKey(MeanCombineFn())


class Top:
    """Largest / smallest elements: `Top.Of`, `Top.Largest`, `Top.Smallest` and `...PerKey`."""

    @staticmethod
    def Of(n: int, key: Optional[Callable[[Any], Any]] = None, reverse: bool = False) -> PTransform:
        """A list of the `n` greatest elements (smallest when `reverse=True`), best first."""
        return CombineGlobally(TopCombineFn(n, key, reverse))

    @staticmethod
    def PerKey(n: int, key: Optional[Callable[[Any], Any]] = None, reverse: bool = False) -> PTransform:
        """For each key, a list of its `n` greatest values."""
        return CombinePerKey(TopCombineFn(n, key, reverse))

    @staticmethod
    def Largest(n: int, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """A list of the `n` largest elements."""
        return Top.Of(n, key)

    @staticmethod
    def Smallest(n: int, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """A list of the `n` smallest elements."""
        return Top.Of(n, key, reverse=True)

    @staticmethod
    def LargestPerKey(n: int, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """For each key, its `n` largest values."""
        return Top.PerKey(n, key)

    @staticmethod
    def SmallestPerKey(n: int, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """For each key, its `n` smallest values."""
        return Top.PerKey(n, key, reverse=True)


def ToList(label: str = "ToList") -> PTransform:
    """All elements (per window) as one list."""
    return label >> CombineGlobally(ToListCombineFn())


def ToDict(label: str = "ToDict") -> PTransform:
    """All (key, value) elements (per window) as one dict."""
    return label >> CombineGlobally(ToDictCombineFn())


def ToSet(label: str = "ToSet") -> PTransform:
    """All distinct elements (per window) as one set."""
    return label >> CombineGlobally(ToSetCombineFn())


class _AddTimestampDoFn(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        yield (element, timestamp.micros)


class _AddTimestampPerKeyDoFn(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        k, v = element
        yield (k, (v, timestamp.micros))


class Latest:
    """The element with the latest event timestamp: `Latest.Globally()`, `Latest.PerKey()`."""

    class Globally(PTransform):
        """The latest element (per window); None for empty input."""

        def expand(self, pcoll: Any) -> Any:
            from headrace.transforms.core import ParDo
            return (pcoll | "AddTimestamp" >> ParDo(_AddTimestampDoFn())
                    | "LatestCombine" >> CombineGlobally(LatestCombineFn()))

    class PerKey(PTransform):
        """For each key, its value with the latest timestamp."""

        def expand(self, pcoll: Any) -> Any:
            from headrace.transforms.core import ParDo
            return (pcoll
                    | "AddTimestamp" >> ParDo(_AddTimestampPerKeyDoFn()).with_output_types(KV_TYPE)
                    | "LatestCombine" >> CombinePerKey(LatestCombineFn()))
