"""Utility transforms: Distinct, and re-exports of Beam's `transforms.util` names."""

from __future__ import annotations

from typing import Any, Tuple

from headrace.pipeline.ptransform import PTransform
from headrace.transforms.core import (
    KV_TYPE, CombinePerKey, CoGroupByKey, Keys, KvSwap, Map, Reshuffle, Values, WithKeys,
)

__all__ = ["Distinct", "CoGroupByKey", "Keys", "KvSwap", "Reshuffle", "Values", "WithKeys"]


def _none_of(values: Any) -> None:
    return None


def _pair_with_none(x: Any) -> Any:
    return (x, None)


class Distinct(PTransform):
    """The distinct elements of a PCollection (per window)."""

    def expand(self, pcoll: Any) -> Any:
        element = getattr(pcoll, "element_type", None)
        pairs = KV_TYPE if element is None else Tuple[element, Any]
        return (pcoll
                | "ToPairs" >> Map(_pair_with_none).with_output_types(pairs)
                | "Group" >> CombinePerKey(_none_of)
                | "Distinct" >> Keys())


RemoveDuplicates = Distinct
