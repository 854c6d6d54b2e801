"""The trigger algebra by example: Beam's trigger specification's examples, asserted through current().

Times are in seconds in `Run` and `ctx(...)` takes microseconds (`S` = one second). Each
expected value comes from the spec; the comment above it says which rule gives it.
"""

from __future__ import annotations

import pickle

import pytest

import headrace as beam
from headrace.errors import InvalidArgumentError
from headrace.model.window import GlobalWindow
from headrace.transforms.trigger import (
    AfterAll, AfterAny, AfterCount, AfterEach, AfterFirst, AfterProcessingTime, AfterWatermark, Always,
    AtPeriod, DefaultTrigger, Done, ElemCount, EndOfWindow, Never, OrFinally, Repeat, Repeatedly,
    RepeatUntil, SequenceOf, SinceEarliestElem,
)
from tests.model._trigger_support import MAX, NO_WAKEUP, S, Run, ctx, spec_is_done, win

# ---- the spec's merge example -------------------------------------------------------------

R1, R2, R3 = ElemCount(2), EndOfWindow(), Repeat(ElemCount(1))
AE = AfterEach(R1, R2, R3)


def test_after_each_merge_example_from_written_states():
    # the spec: AfterEach(R1, R2, R3) ⊕ AfterEach(<done>, <done>, R3) = AfterEach(<done>, R2', R3):
    # merging rewinds (R2 = EndOfWindow comes back, the merged window's end being ahead of
    # the watermark) and `further` moves forward (R1 is done in one of the two).
    fresh = Run(AE, win(20, 30)).elem().state          # R1 has seen one element
    finished = AfterEach(Done(R1), Done(R2), R3).initial_state()
    ahead = ctx(win(0, 30), 10 * S)
    expected = AfterEach(Done(ElemCount(2)), EndOfWindow(), Repeat(ElemCount(1)))
    assert AE.current(AE.merge_states([fresh, finished], ahead)) == expected
    assert AE.current(AE.merge_states([finished, fresh], ahead)) == expected
    # when the merged window has passed too, "所有的输出都是允许的": R2 stays done
    passed = ctx(win(0, 30), 30 * S)
    assert AE.current(AE.merge_states([fresh, finished], passed)) == \
        AfterEach(Done(ElemCount(2)), Done(EndOfWindow()), Repeat(ElemCount(1)))


def test_after_each_merge_example_from_driven_states():
    # w2 = [0, 10): two elements fire R1, the watermark at 10 fires R2 (ON_TIME), one more
    # element fires R3; w1 = [5, 30) saw one element. Merged into [0, 30) with the
    # watermark still at 10, the merged window waits for its own end: R2' = EndOfWindow.
    w2 = Run(AE, win(0, 10)).feed(2)
    assert w2.fired == [2] and w2.current == AfterEach(Done(ElemCount(2)), EndOfWindow(), R3)
    w2.at(wm_s=10)
    assert w2.fire()
    assert w2.current == AfterEach(Done(ElemCount(2)), Done(EndOfWindow()), R3)
    w2.feed(1)
    assert w2.fired == [2, 2, 3]
    w1 = Run(AE, win(5, 30), wm_s=10).elem()
    merged = Run(AE, win(0, 30), wm_s=10,
                 state=AE.merge_states([w1.state, w2.state], ctx(win(0, 30), 10 * S)))
    assert merged.current == AfterEach(Done(ElemCount(2)), EndOfWindow(), Repeat(ElemCount(1)))
    # "所以等待状态应该已经被R2'观察到": not ready before the merged window's end, ready at it
    assert not merged.ready()
    merged.at(wm_s=30)
    assert merged.fire()
    assert merged.current == AfterEach(Done(ElemCount(2)), Done(EndOfWindow()), Repeat(ElemCount(1)))


def test_further_of_elem_count_and_its_tombstone_is_the_tombstone():
    # further(ElemCount(k), Done(ElemCount(k))) = Done(ElemCount(k)) (and commutative)
    t = ElemCount(3)
    live = Run(t, win(0, 10)).elem().elem().state
    done = Done(ElemCount(3)).initial_state()
    assert t.current(t.further(live, done)) == Done(ElemCount(3))
    assert t.current(t.further(done, live)) == Done(ElemCount(3))
    assert t.current(t.merge_states([live, done], ctx(win(0, 20), 0))) == Done(ElemCount(3))
    # two live states: merge_ElemCount(k)(m, n) = m + n, so 2 + 1 elements make it ready
    one = Run(t, win(10, 20)).elem().state
    merged = t.merge_states([live, one], ctx(win(0, 20), 0))
    assert merged == (False, 3) and t.ready(merged, ctx(win(0, 20), 0))


def test_rewind_brings_end_of_window_back_only_while_the_merged_window_is_ahead():
    t = EndOfWindow()
    w = Run(t, win(0, 10), wm_s=10)
    assert w.fire() and w.current == Done(EndOfWindow())
    # rewind(Done(EndOfWindow)) = EndOfWindow when the merged window's end is ahead
    assert t.current(t.rewind(w.state, ctx(win(0, 30), 10 * S))) == EndOfWindow()
    assert t.current(t.rewind(w.state, ctx(win(0, 30), 30 * S - 1))) == EndOfWindow()
    # ... and stays Done once the watermark reached it (EndOfWindow is ready at t >= end)
    assert t.current(t.rewind(w.state, ctx(win(0, 30), 30 * S))) == Done(EndOfWindow())
    assert t.current(t.rewind(w.state, ctx(win(0, 30), 99 * S))) == Done(EndOfWindow())
    # the tombstone as a value rewinds the same way
    d = Done(EndOfWindow())
    assert d.current(d.rewind(d.initial_state(), ctx(win(0, 30), 0))) == EndOfWindow()


@pytest.mark.parametrize("leaf", [ElemCount(2), SinceEarliestElem(5), AtPeriod(10), Never()])
def test_rewind_keeps_other_tombstones_and_live_leaves(leaf):
    # rewind(Done(R)) = Done(R) for a leaf other than EndOfWindow; rewind(ElemCount(k)) = ElemCount(k)
    d = Done(leaf)
    ahead = ctx(win(0, 30), 0)
    assert d.current(d.rewind(d.initial_state(), ahead)) == Done(leaf)
    live = Run(leaf, win(0, 10)).elem().state
    assert leaf.rewind(live, ahead) == live
    # restart(Done(R)) = R
    assert d.current(d.restart(d.initial_state())) == leaf


def test_rewind_restarts_after_each_children_after_the_active_one():
    # rewind(AfterEach(R1..)) = AfterEach(rewind(R1), .., rewind(Rk), restart(Rk+1), ..), Rk
    # the first child not done
    t = AfterEach(ElemCount(1), ElemCount(2), ElemCount(3))
    state = AfterEach(Done(ElemCount(1)), ElemCount(2), Done(ElemCount(3))).initial_state()
    rewound = t.rewind(state, ctx(win(0, 30), 0))
    assert t.current(rewound) == AfterEach(Done(ElemCount(1)), ElemCount(2), ElemCount(3))


# ---- next: the spec's transitions ---------------------------------------------------------


def test_or_finally_branches_count_different_elements():
    # P_{R1.orFinally(R2)}({e1..en}) = P_R1({ek..en}) ∨ P_R2({e1..en}): the main branch is
    # reset when it fires, the finally branch keeps counting every element. So
    # Repeat(ElemCount(2)).orFinally(ElemCount(5)) fires at 2 and 4 (main) and at 5 (finally,
    # with main holding only one element), then is done.
    for t in (Repeat(ElemCount(2)).or_finally(ElemCount(5)), RepeatUntil(ElemCount(2), ElemCount(5)),
              OrFinally(Repeatedly(AfterCount(2)), AfterCount(5))):
        r = Run(t, win(0, 10)).feed(4)
        assert r.state == ((False, 0), (False, 4))  # main reset, finally saw all four
        r.feed(1)
        assert r.fired == [2, 4, 5]
        assert r.done() and spec_is_done(r.current)
        assert r.current.until == Done(t.until)   # the finally branch fired, main did not finish
        assert r.current.main == Repeat(t.main.underlying)
        # next(R1.orFinally(R2)) = nextIfReady(R1).orFinally(nextIfReady(R2)): main was not
        # ready at the fifth element, so it keeps that element
        assert r.state[0] == (False, 1)
        r.feed(2)
        assert r.fired == [2, 4, 5] and r.done()  # done: it never fires again


def test_after_each_fires_each_child_on_new_elements():
    # The reading documented in trigger.py where the spec is silent: a fired child's later
    # siblings start afresh, so AfterEach(AfterCount(2), AfterCount(3)) fires after 2 and
    # then after 3 more elements, then is done.
    r = Run(AfterEach(AfterCount(2), AfterCount(3)), win(0, 10)).feed(9)
    assert r.fired == [2, 5]
    assert r.current == AfterEach(Done(AfterCount(2)), Done(AfterCount(3)))
    assert SequenceOf(AfterCount(2), AfterCount(3)).is_done(Run(
        SequenceOf(AfterCount(2), AfterCount(3)), win(0, 10)).feed(5).state)


def test_repeat_restarts_every_child_of_after_first():
    # next(Repeat(R)) = Repeat(restart(R)) when next(R) is done, and "Repeat(...)的子触发器完成
    # 之后,State会被清空": after firing on the count, SinceEarliestElem forgets the arrival at 0
    t = Repeat(AfterFirst(ElemCount(2), SinceEarliestElem(5)))
    r = Run(t, win(0, 100)).elem().at(pt_s=1).elem()
    assert r.fire() and r.state == t.initial_state()
    r.at(pt_s=3).elem()
    r.at(pt_s=5)
    assert not r.ready()               # would be ready had the arrival at 0 been kept
    r.at(pt_s=7.999999)
    assert not r.ready()
    r.at(pt_s=8)
    assert r.fire()                    # 3 + 5: fired by SinceEarliestElem
    r.elem()
    assert not r.ready()               # ... which restarted ElemCount too: 1 element < 2
    assert r.current == Repeat(AfterFirst(ElemCount(2), SinceEarliestElem(5)))


def test_next_of_after_first_moves_only_the_ready_children():
    # next(AfterFirst(R1, R2)) = AfterFirst(nextIfReady(R1), nextIfReady(R2))
    t = AfterFirst(ElemCount(1), ElemCount(2))
    r = Run(t, win(0, 10)).elem()
    assert r.fire() and r.current == AfterFirst(Done(ElemCount(1)), ElemCount(2))
    r2 = Run(t, win(0, 10)).elem().elem()
    assert r2.fire() and r2.current == AfterFirst(Done(ElemCount(1)), Done(ElemCount(2)))
    # next(AfterAll(R1, R2)) = AfterAll(next(R1), next(R2))
    a = Run(AfterAll(ElemCount(1), EndOfWindow()), win(0, 10)).elem()
    assert not a.fire()
    a.at(wm_s=10)
    assert a.fire() and a.current == AfterAll(Done(ElemCount(1)), Done(EndOfWindow()))


def test_after_watermark_early_on_time_late():
    # AfterWatermark(early=E, late=L) = AfterEach(Repeat(E).orFinally(EndOfWindow), Repeat(L))
    t = AfterWatermark(early=AfterCount(1), late=AfterCount(2))
    r = Run(t, win(0, 10)).feed(2)
    assert r.fired == [1, 2]                                   # early, per element
    r.at(wm_s=10)
    assert r.fire()                                            # on time
    assert r.current == AfterEach(
        OrFinally(Repeat(AfterCount(1)), Done(EndOfWindow())), Repeat(AfterCount(2)))
    r.feed(3)
    assert r.fired == [1, 2, 2, 4]                             # late, per two elements
    assert not r.done()


# ---- time: AtPeriod, SinceEarliestElem, wakeups -------------------------------------------


def test_at_period_fires_at_the_aligned_boundary():
    # boundaries are offset + n * period; the first boundary at or after the earliest arrival
    t = AtPeriod(10, 3)
    r = Run(t, win(0, 100), pt_s=5).elem()
    assert r.trigger.wakeup(r.state, r.ctx) == (MAX, 13 * S)
    r.at(pt_s=12.999999)
    assert not r.ready()
    r.at(pt_s=13)
    assert r.ready()
    # an element arriving exactly on a boundary is ready at once
    assert Run(t, win(0, 100), pt_s=13).elem().ready()
    assert Run(AtPeriod(10), win(0, 100), pt_s=0).elem().ready()
    assert Run(t, win(0, 100), pt_s=-7).elem().ready()          # 3 - 10
    # an offset beyond the period names the same boundaries
    late = Run(AtPeriod(10, 23), win(0, 100), pt_s=5).elem()
    assert late.trigger.wakeup(late.state, late.ctx) == (MAX, 13 * S)
    # the earliest arrival decides
    two = Run(t, win(0, 100), pt_s=14).elem().at(pt_s=22).elem()
    assert t.wakeup(two.state, two.ctx) == (MAX, 23 * S)


@pytest.mark.parametrize("t", [SinceEarliestElem(5), AfterProcessingTime(5)])
def test_since_earliest_elem_measures_processing_time_only(t):
    # SinceEarliestElem(Δ) measures processing time since the earliest element's arrival;
    # event time never enters: a huge watermark jump or event timestamp does not make it ready
    r = Run(t, win(0, 10), pt_s=100).elem(ts_us=-10**12)
    r.at(wm_s=10**9)
    assert not r.ready()
    r.at(pt_s=104.999999)
    assert not r.ready()
    r.at(pt_s=105)
    assert r.ready()
    # no element, no arrival: never ready, whatever the time
    assert not Run(t, win(0, 10), wm_s=10**9, pt_s=10**9).ready()


def test_wakeup_values():
    w = win(0, 10)
    eow = EndOfWindow()
    assert eow.wakeup(eow.initial_state(), ctx(w, 3 * S)) == (10 * S, MAX)
    assert eow.wakeup(eow.initial_state(), ctx(w, 10 * S)) == NO_WAKEUP          # reached
    g = GlobalWindow()
    assert eow.wakeup(eow.initial_state(), ctx(g, 0)) == (g.end_us, MAX)
    since = SinceEarliestElem(5)
    assert since.wakeup(since.initial_state(), ctx(w, 0, 2 * S)) == NO_WAKEUP     # no element yet
    r = Run(since, w, pt_s=2).elem()
    assert since.wakeup(r.state, r.ctx) == (MAX, 7 * S)
    assert since.wakeup(r.state, ctx(w, 0, 7 * S)) == NO_WAKEUP                   # reached
    # elements alone make ElemCount / nothing makes Never ready; Done leaves never wake
    for leaf in (ElemCount(2), Never()):
        assert leaf.wakeup(leaf.initial_state(), ctx(w, 0)) == NO_WAKEUP
    assert Done(EndOfWindow()).wakeup(Done(EndOfWindow()).initial_state(), ctx(w, 0)) == NO_WAKEUP
    # composites: the earliest of the children; AfterEach: its active child only
    for t in (AfterFirst(EndOfWindow(), SinceEarliestElem(5)), AfterAll(EndOfWindow(), SinceEarliestElem(5))):
        r = Run(t, w, pt_s=2).elem()
        assert t.wakeup(r.state, r.ctx) == (10 * S, 7 * S)
    seq = Run(AfterEach(EndOfWindow(), SinceEarliestElem(5)), w, pt_s=2).elem()
    assert seq.trigger.wakeup(seq.state, seq.ctx) == (10 * S, MAX)
    seq.at(wm_s=10, pt_s=11)
    assert seq.fire()
    assert seq.trigger.wakeup(seq.state, seq.ctx) == NO_WAKEUP   # SinceEarliestElem restarted
    seq.at(pt_s=12).elem()
    assert seq.trigger.wakeup(seq.state, seq.ctx) == (MAX, 17 * S)
    # Repeat(EndOfWindow) after firing: the end is reached, MAX from then on
    d = Run(DefaultTrigger(), w, wm_s=10)
    assert d.fire() and d.trigger.wakeup(d.state, d.ctx) == NO_WAKEUP


# ---- isDone and P_Done --------------------------------------------------------------------


@pytest.mark.parametrize("t, done", [
    (Done(ElemCount(2)), True),
    (ElemCount(2), False),
    (AfterFirst(Done(ElemCount(2)), ElemCount(3)), True),
    (AfterAll(Done(ElemCount(2)), ElemCount(3)), False),
    (AfterAll(Done(ElemCount(2)), Done(EndOfWindow())), True),
    (AfterEach(Done(ElemCount(2)), EndOfWindow()), False),
    (AfterEach(Done(ElemCount(2)), Done(EndOfWindow())), True),
    (OrFinally(Repeat(ElemCount(1)), Done(ElemCount(2))), True),
    (OrFinally(Repeat(ElemCount(1)), ElemCount(2)), False),
    (Repeat(AfterAll(Done(ElemCount(2)))), False),
])
def test_is_done_table(t, done):
    # the spec's isDone table
    assert t.is_done(t.initial_state()) is done
    assert spec_is_done(t) is done


def test_a_tombstone_is_ready():
    # P_Done(R) = True ("由于rewind的存在,一个触发器进入Done状态了,仍然会让复合触发器处于Ready状态")
    d = Done(ElemCount(2))
    assert d.ready(d.initial_state(), ctx(win(0, 10), 0))
    t = AfterAll(Done(ElemCount(2)), ElemCount(1))
    assert Run(t, win(0, 10)).elem().ready()


# ---- construction errors ------------------------------------------------------------------


UNTIL = "needs a trigger that fires once as `until`"


@pytest.mark.parametrize("build, fragment", [
    (lambda: AfterAny(Repeatedly(AfterCount(1))), "AfterAny(...) takes only triggers that fire once"),
    (lambda: AfterFirst(Repeat(ElemCount(1))), "AfterFirst(...) takes only triggers that fire once"),
    (lambda: AfterAll(AfterEach(AfterCount(1))), "AfterAll(...) takes only triggers that fire once"),
    (lambda: AfterAll(Repeat(ElemCount(1)).or_finally(ElemCount(2))), "takes only triggers that fire once"),
    (lambda: OrFinally(AfterCount(1), Repeatedly(AfterCount(2))), UNTIL),
    (lambda: AfterCount(1).or_finally(AfterEach(AfterCount(2))), UNTIL),
    (lambda: RepeatUntil(AfterCount(1), Repeat(AfterCount(2))), UNTIL),
    (lambda: AfterCount(0), "needs a positive int count of elements, got 0"),
    (lambda: AfterCount(1.5), "needs a positive int count of elements, got 1.5"),
    (lambda: AfterCount(True), "needs a positive int count of elements, got True"),
    (lambda: ElemCount(-2), "ElemCount(count) needs a positive int count"),
    (lambda: AfterProcessingTime(-1), "AfterProcessingTime(delay) must not be negative"),
    (lambda: SinceEarliestElem("soon"), "SinceEarliestElem(delay) needs seconds or a Duration"),
    (lambda: AtPeriod(0), "AtPeriod(period) must be positive"),
    (lambda: AtPeriod(-5), "AtPeriod(period) must be positive"),
    (lambda: Done(AfterAll(AfterCount(1))), "Done(...) wraps a leaf trigger"),
    (lambda: Done(Repeat(ElemCount(1))), "Done(...) wraps a leaf trigger"),
    (lambda: AfterEach(), "AfterEach(...) needs at least one subtrigger"),
    (lambda: AfterAny(5), "takes triggers such as AfterCount(2)"),
    (lambda: AfterWatermark(early=5), "AfterWatermark(early=...) takes a trigger"),
    (lambda: beam.WindowInto(beam.window.FixedWindows(10), trigger=AfterCount),
     "got the class AfterCount"),
    (lambda: beam.WindowInto(beam.window.FixedWindows(10), trigger="AfterCount(1)"),
     "trigger must be a trigger such as DefaultTrigger()"),
])
def test_construction_errors(build, fragment):
    with pytest.raises(InvalidArgumentError) as info:
        build()
    assert fragment in str(info.value)


def test_the_grammar_accepts_what_it_allows():
    # Trigger ::= AfterEach(Trigger+) | Repeat(Trigger) | Trigger.orFinally(OnceTrigger), and
    # OnceTrigger ::= Done(Leaf) | AfterFirst/AfterAll(OnceTrigger+): none of these raise
    AfterEach(Repeat(ElemCount(1)), AfterAll(ElemCount(2), EndOfWindow()))
    Repeat(Repeat(ElemCount(1))).or_finally(AfterFirst(Done(ElemCount(1)), AfterAll(EndOfWindow())))
    AfterAny(AfterWatermark())  # AfterWatermark() is EndOfWindow, a leaf
    assert AfterWatermark().is_once() and not AfterWatermark(late=AfterCount(1)).is_once()


# ---- triggers are values ------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "AfterWatermark(early=AfterCount(1))",
    "AfterWatermark(early=AfterProcessingTime(60), late=AfterCount(1))",
    "AfterWatermark()",
    "DefaultTrigger()",
    "Always()",
    "Never()",
    "Repeatedly(AfterAny(AfterCount(2), AfterProcessingTime(2.5)))",
    "OrFinally(Repeat(ElemCount(2)), ElemCount(5))",
    "AfterEach(Done(ElemCount(2)), EndOfWindow(), Repeat(ElemCount(1)))",
    "SequenceOf(AtPeriod(10, 3), AtPeriod(1))",
    "AfterAll(SinceEarliestElem(5), EndOfWindow())",
    "RepeatUntil(AfterCount(2), AfterAny(AfterCount(5), EndOfWindow()))",
    "AtPeriod(0.5, -1.25)",
])
def test_repr_reads_back(text):
    t = eval(text)
    assert repr(t) == text
    assert eval(repr(t)) == t and hash(eval(repr(t))) == hash(t)


def test_equality_and_hash():
    assert AfterCount(2) == AfterCount(2) and hash(AfterCount(2)) == hash(AfterCount(2))
    assert AfterCount(2) != AfterCount(3)
    assert AtPeriod(10, 3) != AtPeriod(10) and SinceEarliestElem(5) != SinceEarliestElem(6)
    assert len({Repeat(AfterAll(ElemCount(2), EndOfWindow())),
                Repeat(AfterAll(ElemCount(2), EndOfWindow())),
                Repeat(AfterAll(ElemCount(2), Done(EndOfWindow())))}) == 2
    assert AfterWatermark(early=AfterCount(1)) == AfterWatermark(early=AfterCount(1))
    assert AfterWatermark(early=AfterCount(1)) != AfterWatermark(late=AfterCount(1))
    assert Done(ElemCount(2)) != ElemCount(2)
    assert Always() == Always() and Always() != DefaultTrigger() and Never() == Never()


def test_states_and_triggers_pickle():
    t = AfterWatermark(early=AfterProcessingTime(5), late=AfterCount(2))
    r = Run(t, win(0, 10), pt_s=3).elem()
    r.at(pt_s=9)
    r.fire()
    for obj in (t, r.state, AE, AE.merge_states([AE.initial_state(), AE.initial_state()], r.ctx)):
        assert pickle.loads(pickle.dumps(obj)) == obj
    assert t.current(pickle.loads(pickle.dumps(r.state))) == r.current


# ---- regressions: deviations from the spec these tests found (fixed in fe6d387) -----------------


def test_repeat_restarts_a_tombstone():
    # next(Repeat(R)) = Repeat(restart(R)) when isDone(next(R)): restart(Done(ElemCount(2))) =
    # ElemCount(2). (Was: Repeat re-initialised its child, a Done(leaf) stayed Done, and
    # Repeat(Done(ElemCount(2))) was ready, and fired, forever.)
    t = Repeat(Done(ElemCount(2)))
    r = Run(t, win(0, 10))
    assert r.fire()                       # P_Done = True: it fires once...
    # ... and then, restart(Done(ElemCount(2))) = ElemCount(2), needs two new elements
    assert r.current == Repeat(ElemCount(2))
    assert not r.ready()


def test_current_goes_on_like_the_state_it_was_taken_from():
    # current(state) written as a trigger goes on like the state: when its AfterEach finishes,
    # Repeat restarts every tombstone. (Was: Repeat re-initialised to the Done(...) written in
    # the trigger, so the resumed trigger never went back to ElemCount(1).)
    t = Repeat(AfterEach(ElemCount(1), ElemCount(2)))
    r = Run(t, win(0, 10)).feed(1)
    resumed_trigger = r.current
    assert resumed_trigger == Repeat(AfterEach(Done(ElemCount(1)), ElemCount(2)))
    # both finish the AfterEach after two more elements, then Repeat restarts it:
    # AfterEach(ElemCount(1), ElemCount(2)) fires again on the very next element
    original, resumed = r.feed(3), Run(resumed_trigger, win(0, 10)).feed(3)
    assert original.fired == [1, 3, 4]
    assert resumed.fired == [2, 3]


def test_repeat_until_repr_reads_back():
    # (Was: 'RepeatUntil(Repeat(ElemCount(2)), ElemCount(5))', reading back with a second Repeat.)
    t = RepeatUntil(ElemCount(2), ElemCount(5))
    assert eval(repr(t)) == t


@pytest.mark.parametrize("t", [SinceEarliestElem(12.345678), AfterProcessingTime(1234567),
                               AtPeriod(1234567), AtPeriod(10, 12.345678)])
def test_time_leaf_repr_keeps_every_microsecond(t):
    # (Was: seconds printed with '%g', six significant digits: SinceEarliestElem(12.3457),
    # AtPeriod(1.23457e+06).)
    assert eval(repr(t)) == t
