"""Testing helpers: TestStream (scripted unbounded input), assert_that / equal_to, TestPipeline."""

from headrace.testing.test_pipeline import TestPipeline
from headrace.testing.test_stream import (
    ElementEvent, Event, ProcessingTimeEvent, TestStream, TestStreamError, WatermarkEvent,
)
from headrace.testing.util import (
    BeamAssertException, TestWindowedValue, assert_that, equal_to, is_empty, is_not_empty,
)

__all__ = [
    "BeamAssertException", "ElementEvent", "Event", "ProcessingTimeEvent", "TestPipeline",
    "TestStream", "TestStreamError", "TestWindowedValue", "WatermarkEvent", "assert_that",
    "equal_to", "is_empty", "is_not_empty",
]
