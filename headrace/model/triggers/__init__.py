"""Triggers: the formal algebra of the trigger spec (`algebra`) and the names over it (`sugar`).

`algebra` is Beam's trigger specification (Kenneth Knowles, "Apache Beam Triggering
Semantics") literally (leaves, Done, AfterFirst / AfterAll / AfterEach / Repeat /
OrFinally; ready, next, restart, rewind, further, merging); `sugar` gives Beam's names
(AfterCount, AfterWatermark, Repeatedly, ...) and the paper's (AtCount, SequenceOf,
RepeatUntil, ...) as expressions of it. `headrace.model.trigger` re-exports both, with the
pane options of `headrace.model.strategy`, as one import.
"""
