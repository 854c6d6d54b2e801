"""Pipeline assertions in Beam's style: `assert_that(pcoll, equal_to([...]))`, and Beam's other
matchers and helpers of `apache_beam.testing.util`."""

from __future__ import annotations

import collections
import math
import numbers
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional

from headrace.model.window import GlobalWindow, GlobalWindows
from headrace.model.windowed import PANE_INFO_UNKNOWN, PaneInfo, WindowedValue
from headrace.pipeline.dofn import DoFn
from headrace.pipeline.ptransform import PTransform, ptransform_fn
from headrace.pipeline.pvalue import PCollection, Row
from headrace.transforms.core import (
    KV_TYPE, CoGroupByKey, Create, FlatMap, GroupByKey, Map, ParDo, WindowInto,
)

__all__ = ["AssertThat", "BeamAssertException", "SortLists", "TestWindowedValue", "assert_that",
           "contains_in_any_order", "equal_to", "equal_to_approx", "equal_to_per_window",
           "has_at_least_one", "is_empty", "is_not_empty", "matches_all",
           "row_namedtuple_equals_fn"]


class BeamAssertException(AssertionError):
    """Raised when a pipeline assertion fails."""


class TestWindowedValue(NamedTuple):
    """An element with its timestamp, windows and pane, as `assert_that(..., reify_windows=True)`
    sees it (the pane is PANE_INFO_UNKNOWN for elements that no grouping emitted)."""

    value: Any
    timestamp: Any
    windows: Any
    pane_info: PaneInfo = PANE_INFO_UNKNOWN


def _remove_one(items: List[Any], x: Any, equals: Callable[[Any, Any], bool]) -> bool:
    for i, y in enumerate(items):
        if equals(x, y):
            del items[i]
            return True
    return False


def _is_named_tuple(obj: Any) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_asdict") and hasattr(obj, "_fields")


def _fields_of(obj: Any) -> Dict[str, Any]:
    return obj.as_dict() if isinstance(obj, Row) else dict(obj._asdict())


def row_namedtuple_equals_fn(expected: Any, actual: Any,
                             fallback_equals_fn: Optional[Callable[[Any, Any], bool]] = None) -> bool:
    """An `equals_fn` for equal_to that takes a Row and a NamedTuple with the same fields and
    values (recursively) as equal; anything else is compared with `fallback_equals_fn` (==)."""
    fallback = fallback_equals_fn or (lambda e, a: e == a)
    rowlike = (lambda x: isinstance(x, Row) or _is_named_tuple(x))
    if not (rowlike(expected) and rowlike(actual)):
        return fallback(expected, actual)
    e, a = _fields_of(expected), _fields_of(actual)
    return e.keys() == a.keys() and all(row_namedtuple_equals_fn(v, a[k]) for k, v in e.items())


def equal_to(expected: Iterable[Any], equals_fn: Optional[Callable[[Any, Any], bool]] = None
             ) -> Callable[[Iterable[Any]], None]:
    """A matcher: the actual elements equal `expected` as a multiset (order does not matter);
    elements are compared with `equals_fn(expected, actual)`, by default
    `row_namedtuple_equals_fn` (==, with Rows and NamedTuples of the same fields equal)."""
    expected = list(expected)
    equals = equals_fn or row_namedtuple_equals_fn

    def _equal(actual: Iterable[Any]) -> None:
        actual = list(actual)
        if equals_fn is None:
            try:
                if sorted(expected) == sorted(actual):
                    return
            except TypeError:  # unorderable elements: compare one by one
                pass
        missing = list(expected)
        unexpected = []
        for a in actual:
            if not _remove_one(missing, a, lambda x, y: equals(y, x)):
                unexpected.append(a)
        if missing or unexpected:
            parts = [f"Failed assert: {expected!r} == {actual!r}"]
            if unexpected:
                parts.append(f"unexpected elements {unexpected!r}")
            if missing:
                parts.append(f"missing elements {missing!r}")
            raise BeamAssertException(", ".join(parts))

    return _equal


def _approx_equal(expected: Any, actual: Any, rel_tol: float, abs_tol: float) -> bool:
    if isinstance(expected, numbers.Real) and isinstance(actual, numbers.Real):
        return math.isclose(expected, actual, rel_tol=rel_tol, abs_tol=abs_tol)
    if isinstance(expected, (list, tuple)) and type(actual) is type(expected) \
            and len(expected) == len(actual):
        return all(_approx_equal(e, a, rel_tol, abs_tol) for e, a in zip(expected, actual))
    return bool(expected == actual)


def equal_to_approx(expected: Iterable[Any], rel_tol: float = 1e-09, abs_tol: float = 0.0
                    ) -> Callable[[Iterable[Any]], None]:
    """equal_to, with real numbers (also inside lists and tuples) compared by `math.isclose`."""
    return equal_to(expected, equals_fn=lambda e, a: _approx_equal(e, a, rel_tol, abs_tol))


class _InAnyOrder:
    """Equal to any iterable holding the same items the same number of times."""

    def __init__(self, iterable: Iterable[Any]) -> None:
        self._counter = collections.Counter(iterable)

    def __eq__(self, other: object) -> bool:
        try:
            return self._counter == collections.Counter(other)  # type: ignore[call-overload]
        except TypeError:
            return False

    def __hash__(self) -> int:
        return hash(frozenset(self._counter.items()))

    def __repr__(self) -> str:
        return f"InAnyOrder({dict(self._counter)!r})"


def contains_in_any_order(iterable: Iterable[Any]) -> Any:
    """An object equal to any iterable with the same (hashable) items, counted, in any order:
    use it inside expected elements, e.g. equal_to([("k", contains_in_any_order([1, 2]))])."""
    return _InAnyOrder(iterable)


class _EqualToPerWindowMatcher:
    """The matcher equal_to_per_window returns (assert_that recognises it)."""

    def __init__(self, expected: Dict[Any, Iterable[Any]]) -> None:
        self.expected = {w: list(v) for w, v in expected.items()}

    def __call__(self, actual: Iterable[Any]) -> None:
        left = {w: list(v) for w, v in self.expected.items()}
        for wv in actual:
            if not isinstance(wv, TestWindowedValue):
                raise BeamAssertException(
                    f"Failed assert: received element {wv!r} is not a TestWindowedValue; "
                    "equal_to_per_window needs assert_that(..., reify_windows=True)")
            window = wv.windows[0]
            if window not in left:
                raise BeamAssertException(
                    f"Failed assert: window {window} not found in any expected windows "
                    f"{list(left)}")
            if not _remove_one(left[window], wv.value, lambda x, y: x == y):
                raise BeamAssertException(
                    f"Failed assert: element {wv.value!r} not found in window {window}: "
                    f"{left[window]!r}")
        for window, rest in left.items():
            if rest:
                raise BeamAssertException(
                    f"Failed assert: unmatched elements {rest!r} in window {window}")


def equal_to_per_window(expected_window_to_elements: Dict[Any, Iterable[Any]]) -> Callable[[Any], None]:
    """A matcher: each window's elements equal the expected ones (a dict {window: [elements]});
    assert_that reifies the windows for it."""
    return _EqualToPerWindowMatcher(expected_window_to_elements)


def matches_all(expected: Iterable[Any]) -> Callable[[Iterable[Any]], None]:
    """A matcher: each actual element matches one of `expected`, in any order and one to one;
    an expected item is a value (compared with ==) or a hamcrest-style matcher (an object with
    a `matches(item)` method, e.g. from PyHamcrest, which headrace does not need)."""
    expected = list(expected)

    def _one(e: Any, a: Any) -> bool:
        matches = getattr(e, "matches", None)
        return bool(matches(a)) if callable(matches) and not isinstance(e, (str, bytes)) else bool(e == a)

    def _matches(actual: Iterable[Any]) -> None:
        actual = list(actual)
        left = list(expected)
        unmatched = [a for a in actual if not _remove_one(left, a, lambda x, e: _one(e, x))]
        if unmatched or left:
            raise BeamAssertException(
                f"Failed assert: {actual!r} does not match all of {expected!r} in any order"
                + (f", unmatched elements {unmatched!r}" if unmatched else "")
                + (f", expected items not matched {left!r}" if left else ""))

    return _matches


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
                window: Any = DoFn.WindowParam, pane_info: Any = DoFn.PaneInfoParam):
        yield TestWindowedValue(element, timestamp, [window], pane_info)


class _AddWindowDoFn(DoFn):
    """(the values of a (None, values) group, its window)."""

    def process(self, element: Any, window: Any = DoFn.WindowParam):
        yield (list(element[1]), window)


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
        matcher = self.matcher
        if not isinstance(pcoll.windowing.windowfn, GlobalWindows):
            # use_global_window=False: the matcher is called per window, with (elements, window)
            return (keyed_actual
                    | "Group" >> GroupByKey()
                    | "AddWindow" >> ParDo(_AddWindowDoFn())
                    | "Match" >> Map(matcher))
        keyed_once = pcoll.pipeline | "CreateOnce" >> Create([(None, None)])
        actual = ({"once": keyed_once, "actual": keyed_actual}
                  | "Group" >> CoGroupByKey()
                  | "Unkey" >> Map(_actual_of))
        if not self.use_global_window:
            actual = actual | "AddGlobalWindow" >> Map(_with_global_window)
        return actual | "Match" >> Map(matcher)


def _with_global_window(elements: Any) -> Any:
    return (elements, GlobalWindow())


def assert_that(actual: Any, matcher: Callable[[Any], None], label: str = "assert_that",
                reify_windows: bool = False, use_global_window: bool = True) -> None:
    """Checks, when the pipeline runs, that `matcher(list of elements)` does not raise.

    The matcher gets every element of `actual` up to the end of input (also of an unbounded
    PCollection such as a TestStream's output), retractions included as ordinary elements;
    with `reify_windows`, each as a TestWindowedValue(value, timestamp, [window], pane_info).
    With `use_global_window=False` the matcher is called once per window instead, with
    `(elements of the window, window)` (as in Beam: once with `(elements, GlobalWindow())` for
    an input in the global window, even an empty one; for other windows, once per window that
    has elements). An `equal_to_per_window` matcher always gets the reified elements of all
    windows at once. As in Beam, a label already used in the pipeline gets a number appended
    (`assert_that_2`, `assert_that_3`, ...), so several unlabelled assertions can share a
    pipeline.
    """
    if not isinstance(actual, PCollection):
        raise TypeError(f"assert_that needs a PCollection, got {type(actual).__name__} {actual!r}")
    if isinstance(matcher, _EqualToPerWindowMatcher):
        reify_windows, use_global_window = True, True
    actual | _unique_label(actual.pipeline, label) >> _AssertThat(matcher, reify_windows,
                                                                  use_global_window)


@ptransform_fn
def AssertThat(pcoll: Any, *args: Any, **kwargs: Any) -> Any:
    """assert_that as a transform: `pcoll | AssertThat(equal_to([...]))`."""
    return assert_that(pcoll, *args, **kwargs)


def _criterion_holds(criterion: Callable[..., Any]) -> Any:
    def apply(e: Any, t: Any = DoFn.TimestampParam, w: Any = DoFn.WindowParam,
              p: Any = DoFn.PaneInfoParam) -> Any:
        return [(e, t, w, p)] if criterion(e, t, w, p) else []
    return apply


def _not_empty_criterion(actual: Iterable[Any]) -> None:
    if not list(actual):
        raise BeamAssertException("Failed assert: nothing matches the criterion")


def has_at_least_one(input: Any, criterion: Callable[[Any, Any, Any, Any], Any],
                     label: str = "has_at_least_one") -> None:
    """Checks, when the pipeline runs, that `criterion(element, timestamp, window, pane_info)`
    holds for at least one element of `input`."""
    label = _unique_label(input.pipeline, label)
    matching = input | label >> FlatMap(_criterion_holds(criterion))
    assert_that(matching, _not_empty_criterion, label=label + "_check")


def _sort_lists(result: Any) -> Any:
    if isinstance(result, list):
        return sorted(result)
    if isinstance(result, tuple):  # a tuple's items are sorted inside, the tuple is kept in order
        return tuple(_sort_lists(e) for e in result)
    if isinstance(result, dict):
        return {k: _sort_lists(v) for k, v in result.items()}
    if isinstance(result, Iterable) and not isinstance(result, str):
        return sorted(result)
    return result


#: Sorts every list (and tuple, iterable, dict value) element, for order-free comparisons.
SortLists = Map(_sort_lists)


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
