"""Beam's `apache_beam.transforms.trigger`: triggers, AccumulationMode, and the spec's algebra.

Beam's names (AfterWatermark, AfterCount, AfterProcessingTime, AfterAny, AfterAll, AfterEach,
Repeatedly, OrFinally, Always, Never, DefaultTrigger) are sugar over the formal trigger
algebra of `headrace.model.triggers.algebra` (ElemCount, EndOfWindow, SinceEarliestElem,
AtPeriod, Done, AfterFirst, Repeat, ...), which is exported here too, with the paper's AtCount,
AtWatermark, SequenceOf and RepeatUntil (all gathered by `headrace.model.trigger`).
"""

from headrace.model.trigger import (
    AccumulationMode, AfterAll, AfterAny, AfterCount, AfterEach, AfterFirst, AfterProcessingTime,
    AfterWatermark, Always, AtCount, AtPeriod, AtWatermark, ClosingBehavior, DefaultTrigger, Done,
    ElemCount, EndOfWindow, LeafTrigger, Never, OnTimeBehavior, OrFinally, Repeat, Repeatedly,
    RepeatUntil, SequenceOf, SinceEarliestElem, TriggerContext, TriggerFn,
)

__all__ = [
    "AccumulationMode", "AfterAll", "AfterAny", "AfterCount", "AfterEach", "AfterFirst",
    "AfterProcessingTime", "AfterWatermark", "Always", "AtCount", "AtPeriod", "AtWatermark",
    "ClosingBehavior", "DefaultTrigger", "Done", "ElemCount", "EndOfWindow", "LeafTrigger",
    "Never", "OnTimeBehavior", "OrFinally", "Repeat", "RepeatUntil", "Repeatedly", "SequenceOf",
    "SinceEarliestElem", "TriggerContext", "TriggerFn",
]
