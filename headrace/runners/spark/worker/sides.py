"""Side inputs on the Spark workers: a view that pickles without the pipeline graph, and the
reader of side-input contents shipped to the tasks."""

from __future__ import annotations

import copy
from typing import Any, Dict, Iterable, List, Mapping, Tuple

from headrace.model.strategy import Windowing
from headrace.runners.kit.side_inputs import SideInputReader


class SideStub:
    """Stands for a side input's PCollection on the workers: its label and windowing only."""

    def __init__(self, label: str, windowing: Windowing) -> None:
        self.label = label
        self.windowing = windowing


def portable_side(side: Any, index: int) -> Any:
    """A copy of an AsSideInput that pickles without the pipeline graph, tagged with `index`."""
    stub = copy.copy(side)
    stub.pvalue = SideStub(side.pvalue.label, side.pvalue.windowing)
    stub.index = index
    return stub


def portable_views(views: Iterable[Any]) -> Tuple[Dict[int, Any], List[Any]]:
    """Portable copies of a step's side-input views: ({id(view): portable view}, the distinct
    views in index order). A view passed twice gets one copy; the copies are indexed 0, 1, ...
    in the order the views come."""
    portable: Dict[int, Any] = {}
    distinct: List[Any] = []
    for view in views:
        if id(view) not in portable:
            portable[id(view)] = portable_side(view, len(portable))
            distinct.append(view)
    return portable, distinct


def side_reader(contents: Mapping[int, Any], args: Iterable[Any]) -> SideInputReader:
    """The reader of side-input contents ({index: {window: [values]}}, an index missing when its
    side input is empty) for the portable views among `args`."""
    return SideInputReader({a: contents.get(a.index, {}) for a in args
                            if isinstance(getattr(a, "pvalue", None), SideStub)})


def stage_arguments(stage: Any) -> List[Any]:
    """Every extra argument of a fused stage's steps (where its portable views are)."""
    return [a for step in stage.steps for a in list(step.args) + list((step.kwargs or {}).values())]


def combiner_arguments(combiner: Any) -> List[Any]:
    """Every extra argument of a SideInputCombiner (where its portable views are)."""
    return list(combiner.args) + list(combiner.kwargs.values())
