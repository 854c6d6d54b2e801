"""Beam's `transforms.combiners`: Count, Mean, Top, Sample, ToList, ToDict, ToSet, Latest and their
CombineFns, and TupleCombineFn / SingleInputTupleCombineFn."""

from __future__ import annotations

import copy
import random
import typing
from typing import Any, Callable, List, Optional

from headrace.errors import InvalidArgumentError
from headrace.model.combine import (
    CombineFn, ConcatListCombineFn, CountCombineFn, LatestCombineFn, MeanCombineFn,
    SingleInputTupleCombineFn, ToDictCombineFn, ToListCombineFn, ToSetCombineFn, TopCombineFn,
    TupleCombineFn,
)
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.transforms import core  # noqa: F401  (Beam's combiners module has `core` too)
from headrace.transforms.core import KV_TYPE, CombineGlobally, CombinePerKey, FlatMap, Map, ParDo

__all__ = ["Count", "Mean", "Top", "Sample", "ToList", "ToDict", "ToSet", "Latest",
           "CombinerWithoutDefaults", "CountCombineFn", "MeanCombineFn", "TopCombineFn",
           "Largest", "Smallest", "SampleCombineFn", "ToListCombineFn", "ToDictCombineFn",
           "ToSetCombineFn", "ConcatListCombineFn", "LatestCombineFn", "TupleCombineFn",
           "SingleInputTupleCombineFn"]


class CombinerWithoutDefaults(PTransform):
    """A global combiner that can be told, as CombineGlobally can, to output nothing for empty
    input or windows (`without_defaults()`), which it must do in non-global windows."""

    def __init__(self, has_defaults: bool = True) -> None:
        super().__init__()
        self.has_defaults = has_defaults

    def with_defaults(self, has_defaults: bool = True) -> Any:
        """A copy that outputs (or, with False, does not output) the default for empty input."""
        out = copy.copy(self)
        out.has_defaults = has_defaults
        return out

    def without_defaults(self) -> Any:
        """A copy that outputs nothing for empty input or windows."""
        return self.with_defaults(False)

    def _globally(self, fn: CombineFn) -> CombineGlobally:
        combine = CombineGlobally(fn)
        return combine if self.has_defaults else combine.without_defaults()


def _pair_with_none(x: Any) -> Any:
    return (x, None)


class Count:
    """Counting combiners: `Count.Globally()`, `Count.PerKey()`, `Count.PerElement()`."""

    class Globally(CombinerWithoutDefaults):
        """The number of elements (per window)."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | self._globally(CountCombineFn())

    class PerKey(PTransform):
        """The number of values of each key."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | CombinePerKey(CountCombineFn())

    class PerElement(PTransform):
        """(element, number of occurrences) for each distinct element."""

        def expand(self, pcoll: Any) -> Any:
            return (pcoll
                    | "PairWithVoid" >> Map(_pair_with_none).with_output_types(KV_TYPE)
                    | "CombinePerKey" >> CombinePerKey(CountCombineFn()))


class Mean:
    """Mean combiners: `Mean.Globally()`, `Mean.PerKey()` (NaN for no input)."""

    class Globally(CombinerWithoutDefaults):
        """The mean of all elements (per window)."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | self._globally(MeanCombineFn())

    class PerKey(PTransform):
        """The mean of each key's values."""

        def expand(self, pcoll: Any) -> Any:
            return pcoll | CombinePerKey(MeanCombineFn())


class Largest(TopCombineFn):
    """The `n` largest inputs, largest first."""

    def default_label(self) -> str:
        return f"Largest({self._n})"


class Smallest(TopCombineFn):
    """The `n` smallest inputs, smallest first."""

    def __init__(self, n: int) -> None:
        super().__init__(n, reverse=True)

    def default_label(self) -> str:
        return f"Smallest({self._n})"


class _TopOfFn(TopCombineFn):
    """`Top.Of`'s CombineFn in the default windowing: TopCombineFn, with equal elements output
    in the order Beam's per-bundle `Top.Of` gives them (docs/semantics.md)."""

    def __init__(self, fn: TopCombineFn) -> None:
        super().__init__(fn._n, fn._key, fn._reverse)

    def extract_output(self, acc: Any) -> List[Any]:
        return self._extract_bundle_order(acc)


class Top:
    """Extremal elements: `Top.Of`, `Top.PerKey`, `Top.Largest`, `Top.Smallest`, `...PerKey`."""

    class Of(CombinerWithoutDefaults):
        """A list of the `n` greatest elements by `key` (smallest with `reverse=True`), best first."""

        def __init__(self, n: int, key: Optional[Callable[[Any], Any]] = None,
                     reverse: bool = False) -> None:
            super().__init__()
            self._fn = TopCombineFn(n, key, reverse)  # checks n
            self._n = n

        def default_label(self) -> str:
            return f"Top({self._n})"

        def expand(self, pcoll: Any) -> Any:
            if pcoll.windowing.is_default():
                # Beam combines per bundle here: the same elements win, equal ones come out in
                # the reverse order, and there is always one output (`[]` for no input)
                return pcoll | CombineGlobally(_TopOfFn(self._fn))
            return pcoll | self._globally(self._fn)

    class PerKey(PTransform):
        """For each key, a list of its `n` greatest values (smallest with `reverse=True`)."""

        def __init__(self, n: int, key: Optional[Callable[[Any], Any]] = None,
                     reverse: bool = False) -> None:
            super().__init__()
            self._fn = TopCombineFn(n, key, reverse)
            self._n = n

        def default_label(self) -> str:
            return f"TopPerKey({self._n})"

        def expand(self, pcoll: Any) -> Any:
            return pcoll | CombinePerKey(self._fn)

    @staticmethod
    def Largest(n: int, has_defaults: bool = True, key: Optional[Callable[[Any], Any]] = None
                ) -> PTransform:
        """A list of the `n` largest elements (no output for empty input without defaults)."""
        return Top.Of(n, key).with_defaults(has_defaults)

    @staticmethod
    def Smallest(n: int, has_defaults: bool = True, key: Optional[Callable[[Any], Any]] = None
                 ) -> PTransform:
        """A list of the `n` smallest elements."""
        return Top.Of(n, key, reverse=True).with_defaults(has_defaults)

    @staticmethod
    def LargestPerKey(n: int, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """For each key, its `n` largest values."""
        return Top.PerKey(n, key)

    @staticmethod
    def SmallestPerKey(n: int, *, key: Optional[Callable[[Any], Any]] = None) -> PTransform:
        """For each key, its `n` smallest values."""
        return Top.PerKey(n, key, reverse=True)


def _check_n(where: str, n: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise InvalidArgumentError(f"{where} needs a non-negative int n, got {n!r}")


class SampleCombineFn(CombineFn):
    """A uniform random sample of `n` inputs without replacement (all of them when fewer)."""

    def __init__(self, n: int) -> None:
        _check_n("SampleCombineFn", n)
        self._top = TopCombineFn(n, key=_first)

    def create_accumulator(self) -> Any:
        return self._top.create_accumulator()

    def add_input(self, acc: Any, element: Any) -> Any:
        # each input gets a random rank; the n highest ranks are a uniform sample
        return self._top.add_input(acc, (random.random(), element))

    def merge_accumulators(self, accumulators: Any) -> Any:
        return self._top.merge_accumulators(accumulators)

    def compact(self, acc: Any) -> Any:
        return self._top.compact(acc)

    def extract_output(self, acc: Any) -> List[Any]:
        return [e for _, e in self._top.extract_output(acc)]


def _first(pair: Any) -> Any:
    return pair[0]


class _SampleAnyCombineFn(CombineFn):
    """Up to `n` arbitrary inputs (no random choice)."""

    def __init__(self, n: int) -> None:
        self._n = n

    def create_accumulator(self) -> List[Any]:
        return []

    def add_input(self, acc: List[Any], element: Any) -> List[Any]:
        if len(acc) < self._n:
            acc.append(element)
        return acc

    def merge_accumulators(self, accumulators: Any) -> List[Any]:
        out: List[Any] = []
        for a in accumulators:
            out.extend(a[: self._n - len(out)])
        return out

    def extract_output(self, acc: List[Any]) -> List[Any]:
        return acc


def _identity(x: Any) -> Any:
    return x


class Sample:
    """Sampling without replacement: `Sample.FixedSizeGlobally(n)`, `Sample.FixedSizePerKey(n)`,
    `Sample.Any(n)`."""

    class FixedSizeGlobally(CombinerWithoutDefaults):
        """A list of `n` elements chosen uniformly at random (all of them when fewer), per window."""

        def __init__(self, n: int) -> None:
            super().__init__()
            _check_n("Sample.FixedSizeGlobally", n)
            self._n = n

        def default_label(self) -> str:
            return f"FixedSizeGlobally({self._n})"

        def expand(self, pcoll: Any) -> Any:
            return pcoll | self._globally(SampleCombineFn(self._n))

    class FixedSizePerKey(PTransform):
        """For each key, a list of `n` of its values chosen uniformly at random."""

        def __init__(self, n: int) -> None:
            super().__init__()
            _check_n("Sample.FixedSizePerKey", n)
            self._n = n

        def default_label(self) -> str:
            return f"FixedSizePerKey({self._n})"

        def expand(self, pcoll: Any) -> Any:
            return pcoll | CombinePerKey(SampleCombineFn(self._n))

    class Any(PTransform):
        """Up to `n` arbitrary elements (not chosen at random), as elements, per window."""

        def __init__(self, n: int) -> None:
            super().__init__()
            _check_n("Sample.Any", n)
            self._n = n

        def default_label(self) -> str:
            return f"Any({self._n})"

        def expand(self, pcoll: typing.Any) -> typing.Any:
            return (pcoll
                    | CombineGlobally(_SampleAnyCombineFn(self._n)).without_defaults()
                    | FlatMap(_identity))


class ToList(CombinerWithoutDefaults):
    """All elements (per window) as one list."""

    def expand(self, pcoll: Any) -> Any:
        return pcoll | self.label >> self._globally(ToListCombineFn())


class ToDict(CombinerWithoutDefaults):
    """All (key, value) elements (per window) as one dict (one value kept per key)."""

    def expand(self, pcoll: Any) -> Any:
        return pcoll | self.label >> self._globally(ToDictCombineFn())


class ToSet(CombinerWithoutDefaults):
    """All distinct elements (per window) as one set."""

    def expand(self, pcoll: Any) -> Any:
        return pcoll | self.label >> self._globally(ToSetCombineFn())


class _AddTimestampDoFn(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        yield (element, timestamp.micros)


class _AddTimestampPerKeyDoFn(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam):
        k, v = element
        yield (k, (v, timestamp.micros))


class Latest:
    """The element with the latest event timestamp: `Latest.Globally()`, `Latest.PerKey()`."""

    class Globally(CombinerWithoutDefaults):
        """The latest element (per window); None for empty input (nothing without defaults)."""

        def expand(self, pcoll: Any) -> Any:
            return (pcoll | "AddTimestamp" >> ParDo(_AddTimestampDoFn())
                    | "LatestCombine" >> self._globally(LatestCombineFn()))

    class PerKey(PTransform):
        """For each key, its value with the latest timestamp."""

        def expand(self, pcoll: Any) -> Any:
            return (pcoll
                    | "AddTimestamp" >> ParDo(_AddTimestampPerKeyDoFn()).with_output_types(KV_TYPE)
                    | "LatestCombine" >> CombinePerKey(LatestCombineFn()))
