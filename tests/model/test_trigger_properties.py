"""The trigger properties runners plan with, answered by each trigger class for itself:
`blind_before_end_of_window` (no element can make the trigger ready before the end of the
window while processing time stays put) and `finishes_at_end_of_window`; Beam's named triggers
answer as the expression they stand for."""

from __future__ import annotations

import pytest

from headrace.transforms.trigger import (
    AfterAll, AfterAny, AfterCount, AfterEach, AfterFirst, AfterProcessingTime, AfterWatermark,
    Always, AtCount, AtPeriod, AtWatermark, DefaultTrigger, Done, ElemCount, EndOfWindow,
    LeafTrigger, Never, OrFinally, Repeat, Repeatedly, RepeatUntil, SequenceOf, SinceEarliestElem,
)


class _UserLeaf(LeafTrigger):
    """A user's leaf: the runner cannot know when it is ready."""

    def is_ready(self, data, ctx):
        return False


BLIND = [
    # leaves
    (EndOfWindow(), True),
    (AtWatermark(), True),
    (Never(), True),
    (SinceEarliestElem(5), True),
    (AfterProcessingTime(60), True),
    (SinceEarliestElem(0), False),          # ready on an element's arrival
    (ElemCount(1), False),
    (AfterCount(3), False),
    (AtCount(2), False),
    (AtPeriod(60), False),                  # ready at once on an arrival on a boundary
    (_UserLeaf(), False),
    (Done(EndOfWindow()), False),
    # composites: every subtrigger
    (Repeat(EndOfWindow()), True),
    (Repeatedly(AfterProcessingTime(30)), True),
    (Repeat(ElemCount(2)), False),
    (AfterFirst(EndOfWindow(), SinceEarliestElem(5)), True),
    (AfterAny(AfterCount(3), AfterProcessingTime(60)), False),
    (AfterAll(AfterProcessingTime(5), AfterWatermark()), True),
    (AfterAll(AfterCount(2), EndOfWindow()), False),
    (OrFinally(Repeat(SinceEarliestElem(5)), EndOfWindow()), True),
    (OrFinally(Repeat(ElemCount(1)), EndOfWindow()), False),
    (RepeatUntil(AfterProcessingTime(5), AtWatermark()), True),
    # AfterEach: only the first is active before the end of the window when it finishes there
    (AfterEach(EndOfWindow(), Repeat(ElemCount(1))), True),
    (AfterEach(OrFinally(Repeat(SinceEarliestElem(5)), EndOfWindow()), Repeat(ElemCount(1))), True),
    (AfterEach(SinceEarliestElem(5), EndOfWindow()), True),
    (AfterEach(SinceEarliestElem(5), ElemCount(1)), False),
    (SequenceOf(ElemCount(2), EndOfWindow()), False),
    # Beam's named expressions
    (DefaultTrigger(), True),
    (AfterWatermark(), True),
    (AfterWatermark(early=AfterProcessingTime(60), late=AfterCount(1)), True),
    (AfterWatermark(early=AfterCount(2)), False),
    (AfterWatermark(early=AfterProcessingTime(0)), False),
    (Always(), False),
]


@pytest.mark.parametrize("trigger, blind", BLIND, ids=[repr(t) for t, _ in BLIND])
def test_blind_before_end_of_window(trigger, blind):
    assert trigger.blind_before_end_of_window is blind


FINISHES = [
    (EndOfWindow(), True),
    (AtWatermark(), True),
    (Never(), False),
    (ElemCount(1), False),
    (SinceEarliestElem(5), False),
    (Repeat(EndOfWindow()), False),           # a Repeat never finishes
    (DefaultTrigger(), False),
    (AfterEach(EndOfWindow()), False),
    (AfterFirst(EndOfWindow()), False),
    # OrFinally: its `until` at the end of the window, its main part a Repeat or also there
    (OrFinally(Repeat(SinceEarliestElem(5)), EndOfWindow()), True),
    (OrFinally(EndOfWindow(), EndOfWindow()), True),
    (OrFinally(SinceEarliestElem(5), EndOfWindow()), False),
    (OrFinally(Repeat(EndOfWindow()), ElemCount(3)), False),
    (RepeatUntil(AfterCount(2), AtWatermark()), True),
    (AfterWatermark(), True),
    (AfterWatermark(early=AfterCount(1)), True),
    (AfterWatermark(late=AfterCount(1)), False),
]


@pytest.mark.parametrize("trigger, finishes", FINISHES, ids=[repr(t) for t, _ in FINISHES])
def test_finishes_at_end_of_window(trigger, finishes):
    assert trigger.finishes_at_end_of_window is finishes
