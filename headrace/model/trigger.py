"""Every trigger name in one import: the algebra, Beam's and the paper's names, the pane options.

A re-export, so the rest of headrace (and `headrace.transforms.trigger`, Beam's public
module) imports triggers from one place. The code is in:

* `headrace.model.triggers.algebra`: the formal trigger algebra of Beam's trigger specification
  (TriggerContext, TriggerFn, LeafTrigger, ElemCount, EndOfWindow, SinceEarliestElem, AtPeriod, Never, Done,
  AfterFirst, AfterAll, AfterEach, Repeat, OrFinally, check_trigger);
* `headrace.model.triggers.sugar`: Beam's names (AfterCount, AfterProcessingTime, AfterAny,
  Repeatedly, AfterWatermark, DefaultTrigger, Always) and the paper's (AtCount, AtWatermark,
  SequenceOf, RepeatUntil) over that algebra;
* `headrace.model.strategy`: AccumulationMode, ClosingBehavior, OnTimeBehavior and their checks.
"""

from headrace.model.strategy import (
    AccumulationMode, ClosingBehavior, OnTimeBehavior, check_accumulation_mode, check_enum,
)
from headrace.model.triggers.algebra import (
    NO_WAKEUP, AfterAll, AfterEach, AfterFirst, AtPeriod, Done, ElemCount, EndOfWindow,
    LeafTrigger, Never, OrFinally, Repeat, SinceEarliestElem, TriggerContext, TriggerFn,
    check_trigger,
)
from headrace.model.triggers.sugar import (
    AfterAny, AfterCount, AfterProcessingTime, AfterWatermark, Always, AtCount, AtWatermark,
    DefaultTrigger, Repeatedly, RepeatUntil, SequenceOf,
)

__all__ = [
    "NO_WAKEUP", "AccumulationMode", "AfterAll", "AfterAny", "AfterCount", "AfterEach",
    "AfterFirst", "AfterProcessingTime", "AfterWatermark", "Always", "AtCount", "AtPeriod",
    "AtWatermark", "ClosingBehavior", "DefaultTrigger", "Done", "ElemCount", "EndOfWindow",
    "LeafTrigger", "Never", "OnTimeBehavior", "OrFinally", "Repeat", "RepeatUntil", "Repeatedly",
    "SequenceOf", "SinceEarliestElem", "TriggerContext", "TriggerFn", "check_accumulation_mode",
    "check_enum", "check_trigger",
]
