"""Testing helpers: TestStream (scripted unbounded input), assert_that / equal_to, TestPipeline."""

from headrace.testing.test_pipeline import TestPipeline
from headrace.testing.test_stream import (
    ElementEvent, Event, ProcessingTimeEvent, TestStream, TestStreamError, WatermarkEvent,
)
from headrace.testing.util import (
    AssertThat, BeamAssertException, SortLists, TestWindowedValue, assert_that,
    contains_in_any_order, equal_to, equal_to_approx, equal_to_per_window, has_at_least_one,
    is_empty, is_not_empty, matches_all, row_namedtuple_equals_fn,
)

__all__ = [
    "AssertThat", "SortLists", "contains_in_any_order", "equal_to_approx", "equal_to_per_window",
    "has_at_least_one", "matches_all", "row_namedtuple_equals_fn",
    "BeamAssertException", "ElementEvent", "Event", "ProcessingTimeEvent", "TestPipeline",
    "TestStream", "TestStreamError", "TestWindowedValue", "WatermarkEvent", "assert_that",
    "equal_to", "is_empty", "is_not_empty",
]
