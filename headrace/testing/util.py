"""Pipeline assertions in Beam's style: `assert_that(pcoll, equal_to([...]))`."""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, NamedTuple, Optional

from headrace.model.window import GlobalWindows
from headrace.model.windowed import WindowedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform
from headrace.transforms.core import KV_TYPE, CoGroupByKey, Create, Map, ParDo, WindowInto


class BeamAssertException(AssertionError):
    """Raised when a pipeline assertion fails."""


class TestWindowedValue(NamedTuple):
    """An element with its timestamp and windows, as `assert_that(..., reify_windows=True)` sees it."""

    value: Any
    timestamp: Any
    windows: Any


def _remove_one(items: List[Any], x: Any, equals: Callable[[Any, Any], bool]) -> bool:
    for i, y in enumerate(items):
        if equals(x, y):
            del items[i]
            return True
    return False


def equal_to(expected: Iterable[Any], equals_fn: Optional[Callable[[Any, Any], bool]] = None
             ) -> Callable[[Iterable[Any]], None]:
    """A matcher: the actual elements equal `expected` as a multiset (order does not matter)."""
    expected = list(expected)
    equals = equals_fn or (lambda a, b: a == b)

    def _equal(actual: Iterable[Any]) -> None:
        actual = list(actual)
        missing = list(expected)
        unexpected = []
        for a in actual:
            if not _remove_one(missing, a, equals):
                unexpected.append(a)
        if missing or unexpected:
            parts = [f"Failed assert: {expected!r} == {actual!r}"]
            if unexpected:
                parts.append(f"unexpected elements {unexpected!r}")
            if missing:
                parts.append(f"missing elements {missing!r}")
            raise BeamAssertException(", ".join(parts))

    return _equal


def is_empty() -> Callable[[Iterable[Any]], None]:
    """A matcher: the PCollection has no elements."""

    def _empty(actual: Iterable[Any]) -> None:
        actual = list(actual)
        if actual:
            raise BeamAssertException(f"Failed assert: [] == {actual!r}")

    return _empty


def is_not_empty() -> Callable[[Iterable[Any]], None]:
    """A matcher: the PCollection has at least one element."""

    def _not_empty(actual: Iterable[Any]) -> None:
        if not list(actual):
            raise BeamAssertException("Failed assert: the PCollection is empty")

    return _not_empty


class _ReifyDoFn(DoFn):
    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam,
                window: Any = DoFn.WindowParam):
        yield TestWindowedValue(element, timestamp, [window])


def _void_key(v: Any) -> Any:
    return (None, v)


class _VoidKeyPlainDoFn(DoFn):
    """Keys each element by None as a plain element: the assertion sees retractions as elements."""

    def process(self, element: Any, timestamp: Any = DoFn.TimestampParam,
                window: Any = DoFn.WindowParam):
        yield WindowedValue((None, element), timestamp.micros, (window,))


def _actual_of(kv: Any) -> Any:
    return kv[1]["actual"]


class _AssertThat(PTransform):
    def __init__(self, matcher: Callable[[Any], None], reify_windows: bool,
                 use_global_window: bool) -> None:
        super().__init__()
        self.matcher = matcher
        self.reify_windows = reify_windows
        self.use_global_window = use_global_window

    def expand(self, pcoll: Any) -> Any:
        if self.reify_windows:
            pcoll = pcoll | "ReifyWindows" >> ParDo(_ReifyDoFn())
        if self.use_global_window:
            pcoll = pcoll | "WindowIntoGlobal" >> WindowInto(GlobalWindows())
        if pcoll.may_contain_retractions:
            # The matcher sees every element, retractions included, rather than what is left
            # after they are subtracted (read DoFn.RetractionParam upstream to tell them apart).
            keyed_actual = pcoll | "ToVoidKey" >> ParDo(_VoidKeyPlainDoFn()).with_output_types(KV_TYPE)
            keyed_actual.may_contain_retractions = False
        else:
            keyed_actual = pcoll | "ToVoidKey" >> Map(_void_key).with_output_types(KV_TYPE)
        # An assertion reads everything up to the end of input, also from an unbounded
        # PCollection (a TestStream ends); as in Beam, let its global-window grouping through.
        keyed_actual.is_bounded = True
        keyed_once = pcoll.pipeline | "CreateOnce" >> Create([(None, None)])
        matcher = self.matcher
        return ({"once": keyed_once, "actual": keyed_actual}
                | "Group" >> CoGroupByKey()
                | "Unkey" >> Map(_actual_of)
                | "Match" >> Map(matcher))


def assert_that(actual: Any, matcher: Callable[[Any], None], label: str = "assert_that",
                reify_windows: bool = False, use_global_window: bool = True) -> None:
    """Checks, when the pipeline runs, that `matcher(list of elements)` does not raise.

    The matcher gets every element of `actual` up to the end of input (also of an unbounded
    PCollection such as a TestStream's output), retractions included as ordinary elements.
    As in Beam, a label already used in the pipeline gets a number appended (`assert_that_2`,
    `assert_that_3`, ...), so several unlabelled assertions can share a pipeline.
    """
    actual | _unique_label(actual.pipeline, label) >> _AssertThat(matcher, reify_windows,
                                                                  use_global_window)


def _unique_label(pipeline: Any, label: str) -> str:
    """`label`, or `label_2`, `label_3`, ... (the first not yet applied at this level), as Beam does."""
    used = pipeline.applied_labels
    parent = pipeline.current_transform().full_label
    prefix = f"{parent}/" if parent else ""
    if prefix + label not in used:
        return label
    n = 2
    while f"{prefix}{label}_{n}" in used:
        n += 1
    return f"{label}_{n}"
