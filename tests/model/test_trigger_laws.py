"""The laws of Beam's trigger specification, as properties over random trigger trees.

Trees respect the spec's grammar:

    Trigger     ::= OnceTrigger | AfterEach(Trigger+) | Repeat(Trigger) | Trigger.orFinally(OnceTrigger)
    OnceTrigger ::= LeafTrigger | Done(LeafTrigger) | AfterFirst(OnceTrigger+) | AfterAll(OnceTrigger+)

and histories are elements (event timestamp, arriving at the current processing time),
watermark and processing-time advances (monotone), and firings (`next` when ready and not
done, as the per-key core does). Each law quotes the spec in its docstring or comments.
"""

from __future__ import annotations

import copy
import itertools
import os
import pickle

from hypothesis import example, given, settings
from hypothesis import strategies as st

from headrace.model.time import Duration, Timestamp
from headrace.model.window import GlobalWindow
from headrace.transforms.trigger import (
    AfterAll, AfterAny, AfterCount, AfterEach, AfterFirst, AfterProcessingTime, AfterWatermark, Always,
    AtCount, AtPeriod, DefaultTrigger, Done, ElemCount, EndOfWindow, LeafTrigger, Never, OrFinally, Repeat,
    Repeatedly, RepeatUntil, SequenceOf, SinceEarliestElem, TriggerContext,
)
from tests.model._trigger_support import (
    S, children, drive, spec_is_done, tombstones, union, walk, win,
)

# TRIGGER_LAW_EXAMPLES=5000 runs a deeper search locally (the default keeps the file ~10 s)
_N = int(os.environ.get("TRIGGER_LAW_EXAMPLES", "200"))
LAWS = settings(max_examples=_N, deadline=None)
# laws over two or three windows' histories: each example is three times the work
MERGE_LAWS = settings(max_examples=max(1, _N // 2), deadline=None)

# ---- strategies -------------------------------------------------------------------------

DELAYS = [0, 1, 5, 10, 2.5]  # seconds


def leaves(counts_only: bool = False, sugar: bool = True) -> list:
    """LeafTrigger ::= ElemCount(k) | EndOfWindow | SinceEarliestElem(Δ) | AtPeriod(p, o) | Never."""
    counts = [cls(k) for cls in ([ElemCount, AfterCount, AtCount] if sugar else [ElemCount])
              for k in (1, 2, 3, 4)]
    if counts_only:
        return counts
    since = [cls(d) for cls in ([SinceEarliestElem, AfterProcessingTime] if sugar else [SinceEarliestElem])
             for d in DELAYS]
    periods = [AtPeriod(p, o) for p in (1, 5, 10) for o in (0, 3)]
    # EndOfWindow and Never are listed several times so that they are drawn about as often
    # as the families with parameters
    return counts[:4] + [EndOfWindow()] * 3 + since[:5] + periods[:3] + [Never()] * 2 + counts[4:] \
        + since[5:] + periods[3:]


@st.composite
def triggers(draw, counts_only: bool = False, done: bool = False, sugar: bool = True,
             after_each: bool = True, repeat_until: bool = True, once_only: bool = False,
             max_depth: int = 3):
    """A random tree of the spec's grammar (a composite strategy: few draws, fast).

    Trigger     ::= OnceTrigger | AfterEach(Trigger+) | Repeat(Trigger) | Trigger.orFinally(OnceTrigger)
    OnceTrigger ::= LeafTrigger | Done(LeafTrigger) | AfterFirst(OnceTrigger+) | AfterAll(OnceTrigger+)

    `sugar` adds Beam's names (AfterCount, AfterAny, Repeatedly, SequenceOf, AfterWatermark,
    DefaultTrigger, Always, RepeatUntil unless repeat_until=False); `done` adds Done(leaf)
    tombstones; `after_each=False` leaves AfterEach out; `once_only` draws a OnceTrigger.
    """
    leaf_list = leaves(counts_only, sugar)
    if done:  # Done(leaf) for about one leaf in five
        leaf_list = leaf_list + [Done(lf) for lf in leaf_list[::4]]
    once_kinds = [AfterFirst, AfterAll] + ([AfterAny] if sugar else [])
    kinds = ["once", "repeat", "or_finally"] + (["after_each"] if after_each else [])
    if sugar:
        kinds += ["repeatedly"] + (["repeat_until"] if repeat_until else [])
        kinds += ["sequence_of"] if after_each else []
        kinds += [] if counts_only else ["after_watermark", "named"]
    budget = [7]  # composite nodes left
    # one draw per node: small numbers shrink towards leaves and few children

    def once(depth):
        n = draw(st.integers(0, 3 * 3 * len(once_kinds) - 1))
        if depth >= max_depth or budget[0] <= 0 or n < 3 * len(once_kinds):
            return leaf_list[draw(st.integers(0, len(leaf_list) - 1))]
        budget[0] -= 1
        n -= 3 * len(once_kinds)
        return once_kinds[n % len(once_kinds)](*[once(depth + 1) for _ in range(1 + n // len(once_kinds))])

    def trigger(depth):
        if depth >= max_depth or budget[0] <= 0:
            return once(depth)
        n = draw(st.integers(0, 3 * len(kinds) - 1))
        kind, arity = kinds[n % len(kinds)], 1 + n // len(kinds)
        if kind == "once":
            return once(depth)
        budget[0] -= 1
        if kind in ("repeat", "repeatedly"):
            return (Repeat if kind == "repeat" else Repeatedly)(trigger(depth + 1))
        if kind == "or_finally":
            return trigger(depth + 1).or_finally(once(depth + 1))
        if kind == "repeat_until":
            return RepeatUntil(trigger(depth + 1), once(depth + 1))
        if kind in ("after_each", "sequence_of"):
            return (AfterEach if kind == "after_each" else SequenceOf)(
                *[trigger(depth + 1) for _ in range(arity)])
        if kind == "after_watermark":
            early = trigger(depth + 1) if arity & 1 else None
            late = trigger(depth + 1) if after_each and arity > 1 else None
            return AfterWatermark(early=early, late=late)
        return [DefaultTrigger(), Always()][arity & 1]

    return once(0) if once_only else trigger(0)


_KINDS = ("elem", "elem", "wm", "pt", "fire", "fire")


def _event(n: int, kinds) -> tuple:
    # one integer encodes an event: its kind, a value up to 6 s, and whether the value is
    # rounded to whole seconds (so that times land exactly on window ends and AtPeriod
    # boundaries). Elements carry an event timestamp; "wm"/"pt" advance time by the value.
    kind = kinds[n % len(kinds)]
    n //= len(kinds)
    value, whole = (n >> 1) % (6 * S + 1), n & 1
    if kind == "fire":
        return ("fire",)
    return (kind, value - value % S if whole else value)


def events(kinds) -> st.SearchStrategy:
    return st.lists(st.integers(0, 2**40).map(lambda n: _event(n, kinds)), max_size=12)


EVENTS = events(_KINDS)
# events without firings: the spec's "any k new elements and any Δ of time"
QUIET_EVENTS = events(("elem", "elem", "wm", "pt"))
DELTAS = st.integers(0, 6 * S)

INTERVAL_WINDOWS = st.builds(lambda a, n: win(a, a + n), st.integers(0, 15), st.integers(1, 15))
WINDOWS = st.one_of(INTERVAL_WINDOWS, st.just(GlobalWindow()))


TRIGGERS = triggers()
TRIGGERS_WITH_DONE = triggers(done=True)


@st.composite
def merge_cases(draw, n: int = 2, trig: st.SearchStrategy = TRIGGERS_WITH_DONE,
                events: st.SearchStrategy = EVENTS):
    """(trigger, [(window, events)] * n, extra watermark): n windows' histories to merge."""
    t = draw(trig)
    runs = [(draw(INTERVAL_WINDOWS), draw(events)) for _ in range(n)]
    return t, runs, draw(st.sampled_from([0, 0, 5 * S, 40 * S]))


def run_case(case):
    """The states of a merge case, and the context of the merged window (latest times)."""
    t, runs, extra_wm = case
    states, wms, pts = [], [], []
    for window, events in runs:
        s, wm, pt, _ = drive(t, window, events)
        states.append(s)
        wms.append(wm)
        pts.append(pt)
    merged = TriggerContext(union([w for w, _ in runs]), max(wms) + extra_wm, max(pts))
    return t, states, merged


# A regression example for rewind's idempotence (and so the associativity of merging): in
# [0, 10) the watermark reaches 10 and EndOfWindow fires, then one element fires
# ElemCount(1): state AfterEach(Done(EndOfWindow), Done(ElemCount(1)), ElemCount(1)).
# Merged into [0, 30) with the watermark at 10, EndOfWindow must come back.
REWIND_AFTER_EACH = AfterEach(EndOfWindow(), ElemCount(1), ElemCount(1))
REWIND_HISTORY = [("wm", 10 * S), ("fire",), ("elem", 0), ("fire",)]
REWIND_MERGE = (REWIND_AFTER_EACH, [(win(0, 10), REWIND_HISTORY), (win(5, 30), []), (win(20, 30), [])], 0)


# ---- 1. monotonicity of the ready predicate ------------------------------------------------


def assert_monotone(t, s, window, wm, pt, quiet):
    """P_R(e1..en, t) => P_R(e1..en..en+k, t+Δ): once ready, ready after more elements / time."""
    _, _, _, trace = drive(t, window, quiet, state=s, wm_us=wm, pt_us=pt, fire=False)
    readies = [t.ready(s, TriggerContext(window, wm, pt))] + [t.ready(x, c) for x, c in trace]
    first = readies.index(True) if True in readies else len(readies)
    assert all(readies[first:]), (t.current(s), readies)


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=WINDOWS, history=EVENTS, quiet=QUIET_EVENTS)
def test_ready_is_monotone(t, window, history, quiet):
    # the spec: "PR({e1..en},t) => PR({e1..en..en+k},t+Δ)" and
    # "readyR(state) => readyR(onElement(state)) and readyR(onTimer(state))"
    s, wm, pt, _ = drive(t, window, history)
    assert_monotone(t, s, window, wm, pt, quiet)


@MERGE_LAWS
@given(case=merge_cases(), quiet=QUIET_EVENTS)
def test_ready_is_monotone_after_a_merge(case, quiet):
    # the merged window's state is a state like any other: its predicate stays monotone
    t, states, mctx = run_case(case)
    s = t.merge_states(states, mctx)
    assert_monotone(t, s, mctx.window, mctx.input_watermark_us, mctx.processing_time_us, quiet)


# ---- 2. merging is commutative and associative --------------------------------------------


@MERGE_LAWS
@given(case=merge_cases(n=3))
def test_merge_is_commutative(case):
    # the spec: merging the triggers of merged windows must be commutative and associative;
    # the order in which windows are listed must not matter
    t, (a, b, c), mctx = run_case(case)
    assert t.merge_states([a, b], mctx) == t.merge_states([b, a], mctx)
    results = {t.merge_states(list(p), mctx) for p in itertools.permutations([a, b, c])}
    assert len(results) == 1, results


@MERGE_LAWS
@given(case=merge_cases(n=3))
def test_further_is_commutative_and_associative(case):
    # further takes leaf by leaf the further along of two states: Done wins, counts add,
    # earliest arrivals take the minimum; all commutative and associative
    t, (a, b, c), _ = run_case(case)
    assert t.further(a, b) == t.further(b, a)
    assert t.further(t.further(a, b), c) == t.further(a, t.further(b, c))


def assert_associative(t, a, b, c, mctx):
    m = t.merge_states
    left = m([m([a, b], mctx), c], mctx)
    right = m([a, m([b, c], mctx)], mctx)
    flat = m([a, b, c], mctx)
    assert left == right == flat, (t.current(left), t.current(right), t.current(flat))


@MERGE_LAWS
@example(case=REWIND_MERGE)
@given(case=merge_cases(n=3))
def test_merge_is_associative(case):
    # the spec: merging the triggers of merged windows must be commutative and associative,
    # whatever the watermark. The explicit example is a regression: when
    # AfterEach.rewind chose the active child before rewinding, merge_states([a, b, c]) gave
    #   AfterEach(EndOfWindow(), Done(ElemCount(1)), ElemCount(1))
    # but merging a with b first, then with c, gave
    #   AfterEach(EndOfWindow(), ElemCount(1), ElemCount(1))
    t, (a, b, c), mctx = run_case(case)
    assert_associative(t, a, b, c, mctx)


@MERGE_LAWS
@given(case=merge_cases(n=1, trig=TRIGGERS))
def test_an_empty_window_merges_as_the_identity(case):
    # R1 ⊕ R2 must behave as R run on w1w2 from the start: a window that saw nothing adds
    # nothing (its counts are 0, it has no arrivals, nothing in it is Done)
    t, (a,), mctx = run_case(case)
    assert t.further(a, t.initial_state()) == a == t.further(t.initial_state(), a)
    assert t.merge_states([a, t.initial_state()], mctx) == t.rewind(a, mctx)


# ---- 3. merging respects element counts ---------------------------------------------------


@LAWS
@given(t=triggers(counts_only=True), n1=st.integers(0, 6), n2=st.integers(0, 6),
       w1=INTERVAL_WINDOWS, w2=INTERVAL_WINDOWS)
def test_merged_counts_are_the_counts_of_the_union(t, n1, n2, w1, w2):
    # the spec: "ready_{R1⊕R2}(state1 ⊕ state2) ⇔ P_{R1⊕R2}({x1..xn, y1..ym}, t)" with
    # merge_ElemCount(k)(m, n) = m + n. States that never fired: ElemCount(k) is ready in the
    # merged window exactly when n1 + n2 >= k, as if one window had seen all elements.
    s1, _, _, _ = drive(t, w1, [("elem", 0)] * n1, fire=False)
    s2, _, _, _ = drive(t, w2, [("elem", 0)] * n2, fire=False)
    w = union([w1, w2])
    c = TriggerContext(w, 0, 0)
    one, _, _, _ = drive(t, w, [("elem", 0)] * (n1 + n2), fire=False)
    assert t.ready(t.merge_states([s1, s2], c), c) == t.ready(one, c)
    # and readiness is the spec's: all(count >= k) etc. over the union, checked on a leaf
    if isinstance(t, ElemCount):
        assert t.ready(t.merge_states([s1, s2], c), c) == (n1 + n2 >= t.count)


@MERGE_LAWS
@given(t=TRIGGERS, runs=st.lists(st.tuples(INTERVAL_WINDOWS, QUIET_EVENTS), min_size=2, max_size=3),
       later=st.tuples(DELTAS, DELTAS))
def test_merging_never_fired_states_is_one_window_seeing_all_elements(t, runs, later):
    # The same law for every leaf: state1 ⊕ state2 summarises {x...} ∪ {y...} (counts add,
    # earliest arrival is the minimum), so it equals the state of one window that saw all
    # those elements (each arriving when it did), and is ready at the same times.
    states, arrivals, wm, pt = [], [], 0, 0
    for window, events in runs:
        s, w_end, p_end, _ = drive(t, window, events, fire=False)
        states.append(s)
        wm, pt = max(wm, w_end), max(pt, p_end)
        clock = 0
        for ev in events:
            clock += ev[1] if ev[0] == "pt" else 0
            if ev[0] == "elem":
                arrivals.append((clock, ev[1]))
    w = union([r[0] for r in runs])
    one = t.initial_state()
    for arrival, ts in sorted(arrivals):
        one = t.on_element(one, ts, TriggerContext(w, 0, arrival))
    c = TriggerContext(w, wm, pt)
    merged = t.merge_states(states, c)
    assert merged == one
    c2 = TriggerContext(w, wm + later[0], pt + later[1])
    assert t.ready(merged, c2) == t.ready(one, c2)


# ---- 4. next, restart, rewind -------------------------------------------------------------


@LAWS
@given(t=triggers(done=True, once_only=True), window=WINDOWS, history=EVENTS)
def test_next_finishes_a_once_trigger(t, window, history):
    # next(leaf) = Done(leaf); next(AfterFirst) = AfterFirst(nextIfReady(Ri)...) with at least
    # one Ri ready; next(AfterAll) = AfterAll(next(Ri)...): a OnceTrigger fires at most once
    s0 = t.initial_state()
    for s, c in [(s0, TriggerContext(window, 0, 0))] + drive(t, window, history, fire=False)[3]:
        if t.ready(s, c):
            nxt = t.next(s, c)
            assert t.is_done(nxt), t.current(nxt)
            assert spec_is_done(t.current(nxt))


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=WINDOWS, history=EVENTS, quiet=QUIET_EVENTS)
def test_repeat_is_never_done_and_restarts_its_child(t, window, history, quiet):
    # isDone(Repeat(R)) = False; next(Repeat(R)) = Repeat(restart(R)) if isDone(next(R))
    # else Repeat(next(R)); "Repeat(...)的子触发器完成之后,State会被清空" (the child's state is
    # cleared when it finishes): restart lifts every tombstone, Done(leaf)s included, and no
    # element summary survives
    r = Repeat(t)
    s, wm, pt, _ = drive(r, window, history)
    for x, c in [(s, TriggerContext(window, wm, pt))] + drive(r, window, quiet, s, wm, pt)[3]:
        assert not r.is_done(x)
        if r.ready(x, c):
            after = t.next(x, c)
            expected = t.restart(t.initial_state()) if t.is_done(after) else after
            assert r.next(x, c) == expected
            assert not t.is_done(r.next(x, c))


@MERGE_LAWS
@given(case=merge_cases(n=2))
def test_restart_lifts_every_tombstone_and_is_idempotent(case):
    # restart(Done(R)) = R for a leaf; restart(R) restarts all subtriggers: no Done(...) is left
    # anywhere, nothing is done, and restarting again changes nothing
    t, states, mctx = run_case(case)
    for s in states + [t.merge_states(states, mctx)]:
        r = t.restart(s)
        assert tombstones(t.current(r)) == []
        assert not t.is_done(r)
        assert t.restart(r) == r
        # reset = restart with every element summary cleared: the trigger as if it saw nothing
        assert t.reset(s) == t.restart(t.initial_state())


@LAWS
@given(t=TRIGGERS)
def test_restart_of_a_trigger_that_never_moved_is_itself(t):
    # "如果触发器R从未发生过状态迁跃,restart(R) = R"
    s = t.initial_state()
    assert t.restart(s) == s
    assert tombstones(t.current(s)) == []


def spec_rewind(t, before, c):
    """The spec's rewind table, written out (the merged window and watermark are in `c`).

    rewind(Done(EndOfWindow)) = EndOfWindow   while the merged window's end is ahead
    rewind(Done(R)) = Done(R)                 for any other leaf (and EndOfWindow once passed)
    rewind(ElemCount(k)) = ElemCount(k), rewind(EndOfWindow) = EndOfWindow (live leaves keep
                                              their element summaries)
    rewind(AfterFirst/AfterAll(R1, ..)) = AfterFirst/AfterAll(rewind(R1), ..)
    rewind(AfterEach(R1, ..)) = AfterEach(rewind(R1), .., rewind(Rk), restart(Rk+1), ..),
                                              Rk the first child not done (once rewound)
    rewind(Repeat(R)) = Repeat(rewind(R)); rewind(R1.orFinally(R2)) = rewind(R1).orFinally(rewind(R2))
    """
    if hasattr(t, "expr"):
        return spec_rewind(t.expr, before, c)
    if isinstance(t, (LeafTrigger, Done)):
        leaf = t.leaf if isinstance(t, Done) else t
        if before[0] and isinstance(leaf, EndOfWindow) and c.input_watermark_us < c.window.end_us:
            return leaf.initial_state()
        return before
    if isinstance(t, Repeat):
        return spec_rewind(t.triggers[0], before, c)
    subs = children(t)
    if isinstance(t, AfterEach):
        out = []
        for i, (x, b) in enumerate(zip(subs, before)):
            out.append(spec_rewind(x, b, c))
            if not x.is_done(out[-1]):
                return tuple(out) + tuple(y.restart(z) for y, z in zip(subs[i + 1:], before[i + 1:]))
        return tuple(out)
    return tuple(spec_rewind(x, b, c) for x, b in zip(subs, before))


# (seconds the merged window reaches past the window's end, extra watermark in microseconds)
REWIND_CTX = st.tuples(st.integers(0, 20), st.integers(0, 10 * S))


def rewind_case(t, window, history, grow_extra):
    s, wm, pt, _ = drive(t, window, history)
    grow, extra = grow_extra
    merged = win(window.start_us // S, window.end_us // S + grow)
    return s, wm, TriggerContext(merged, wm + extra, pt)


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=INTERVAL_WINDOWS, history=EVENTS, grow_extra=REWIND_CTX)
def test_rewind_is_the_specs_table(t, window, history, grow_extra):
    # rewind changes only Done(EndOfWindow) leaves (while the merged window's end is ahead of
    # the watermark) and AfterEach's children after the active one (restarted)
    s, _, c = rewind_case(t, window, history, grow_extra)
    r = t.rewind(s, c)
    assert r == spec_rewind(t, s, c), (t.current(s), t.current(r))


@LAWS
@given(t=TRIGGERS, window=INTERVAL_WINDOWS, history=EVENTS, grow_extra=REWIND_CTX)
def test_rewind_is_the_identity_unless_an_end_of_window_comes_back(t, window, history, grow_extra):
    # "如果一个窗口并没有到达窗口末尾并且触发了,那么 rewind(R) = R": a window whose end the
    # watermark never reached has no Done(EndOfWindow); and when the merged window has
    # passed too, no EndOfWindow comes back. Either way (without merges, and with no Done
    # tombstone in the trigger as written) rewind changes nothing.
    s, wm, c = rewind_case(t, window, history, grow_extra)
    if wm < window.end_us or c.input_watermark_us >= c.window.end_us:
        assert t.rewind(s, c) == s


@LAWS
@example(t=REWIND_AFTER_EACH, window=win(0, 10), history=REWIND_HISTORY, grow_extra=(20, 0))
@given(t=TRIGGERS_WITH_DONE, window=INTERVAL_WINDOWS, history=EVENTS, grow_extra=REWIND_CTX)
def test_rewind_is_idempotent(t, window, history, grow_extra):
    # rewind answers "where would R, run on the merged window from the start, be stuck before
    # the end of the window": asking twice must give the same answer. The explicit example is
    # a regression: AfterEach(Done(EndOfWindow), Done(ElemCount(1)), ElemCount(1)) rewound once
    # into [0, 30) at watermark 10 gave AfterEach(EndOfWindow(), Done(ElemCount(1)), ElemCount(1)),
    # and a second rewind restarted the Done(ElemCount(1)) behind the revived EndOfWindow.
    s, _, c = rewind_case(t, window, history, grow_extra)
    r = t.rewind(s, c)
    assert t.rewind(r, c) == r, (t.current(r), t.current(t.rewind(r, c)))


# ---- isDone, wakeups ----------------------------------------------------------------------


@MERGE_LAWS
@given(case=merge_cases(n=2))
def test_is_done_is_the_specs_table(case):
    # isDone(Done(..)) = True, isDone(leaf) = False, AfterFirst: any, AfterAll: all,
    # Repeat: False, AfterEach: all, orFinally: either; checked on current(state), for every
    # state of the histories and for the merged state
    t, runs, _ = case
    _, states, mctx = run_case(case)
    seen = [t.merge_states(states, mctx)]
    for window, events in runs:
        seen += [s for s, _ in drive(t, window, events)[3]]
    for s in seen:
        assert t.is_done(s) == spec_is_done(t.current(s)), t.current(s)


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=WINDOWS, history=EVENTS, times=st.lists(st.tuples(DELTAS, DELTAS),
                                                                              max_size=6))
def test_wakeup_never_misses_a_firing(t, window, history, times):
    # wakeup(s) = (watermark, processing time) at which the trigger may become ready with no
    # new element: when it is not ready now, it does not become ready (time alone) before
    # the watermark reaches W or the processing time reaches P; W and P lie ahead (or MAX)
    s, wm, pt, _ = drive(t, window, history)
    c = TriggerContext(window, wm, pt)
    w_at, p_at = t.wakeup(s, c)
    assert w_at > wm and p_at > pt
    if t.ready(s, c):
        return
    for dw, dp in times:
        wm, pt = wm + dw, pt + dp
        if t.ready(s, TriggerContext(window, wm, pt)):
            assert wm >= w_at or pt >= p_at, (t.current(s), (w_at, p_at), (wm, pt))


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=WINDOWS, history=EVENTS)
def test_fires_is_ready_and_not_done(t, window, history):
    # the core asks `fires` (one call per window) for "not isDone and ready"; every node's own
    # answer must be that, in every state of a history, whatever its shortcut
    _, _, _, trace = drive(t, window, history)
    for s, c in [(t.initial_state(), TriggerContext(window, 0, 0))] + trace:
        for node, ns in _nodes_with_states(t, s):
            assert node.fires(ns, c) == (not node.is_done(ns) and node.ready(ns, c)), node


def _nodes_with_states(t, s):
    """(node, its state) of every node of `t` in state `s` (a sugar name: its expression's)."""
    yield t, s
    inner = getattr(t, "expr", None)
    if inner is not None:
        yield from _nodes_with_states(inner, s)
    elif isinstance(t, Repeat):
        yield from _nodes_with_states(t.triggers[0], s)
    elif isinstance(t, (AfterEach, AfterFirst, AfterAll, OrFinally)):
        for child, cs in zip(t.triggers, s):
            yield from _nodes_with_states(child, cs)


@LAWS
@given(t=TRIGGERS_WITH_DONE, window=WINDOWS, history=EVENTS)
def test_the_lowered_trigger_is_the_same_trigger(t, window, history):
    # the core runs `lowered()`: Beam's and the paper's names replaced by their expressions.
    # No name is left in it, and it goes through the same states, firing alike
    low = t.lowered()
    assert not any(hasattr(n, "expr") for n in walk(low)), low
    assert low.lowered() is low
    _, _, _, trace = drive(t, window, history)
    _, _, _, low_trace = drive(low, window, history)
    assert [s for s, _ in low_trace] == [s for s, _ in trace]
    for s, c in trace:
        assert low.ready(s, c) == t.ready(s, c) and low.is_done(s) == t.is_done(s)
        assert low.wakeup(s, c) == t.wakeup(s, c)


# ---- 7. triggers are values ---------------------------------------------------------------


@LAWS
@given(t=TRIGGERS_WITH_DONE)
def test_triggers_are_values(t):
    # equal trees are equal and hash alike; repr reads back as the same trigger
    twin = copy.deepcopy(t)
    assert twin == t and hash(twin) == hash(t)
    back = pickle.loads(pickle.dumps(t))
    assert back == t and hash(back) == hash(t)
    namespace = {cls.__name__: cls for cls in (
        AfterAll, AfterAny, AfterCount, AfterEach, AfterFirst, AfterProcessingTime, AfterWatermark,
        Always, AtCount, AtPeriod, DefaultTrigger, Done, ElemCount, EndOfWindow, Never, Repeat,
        OrFinally, Repeatedly, RepeatUntil, SequenceOf, SinceEarliestElem)}
    assert eval(repr(t), namespace) == t, repr(t)
    assert t != Repeat(t)


@LAWS
@given(delay=st.integers(0, 10**15), period=st.integers(1, 10**15), offset=st.integers(-10**15, 10**15))
def test_time_leaves_repr_reads_back_to_the_microsecond(delay, period, offset):
    # durations are microseconds inside, seconds in the repr: every microsecond must survive
    for t in (SinceEarliestElem(Duration(micros=delay)), AfterProcessingTime(Duration(micros=delay)),
              AtPeriod(Duration(micros=period), Timestamp(micros=offset))):
        back = eval(repr(t), {"SinceEarliestElem": SinceEarliestElem, "AtPeriod": AtPeriod,
                              "AfterProcessingTime": AfterProcessingTime})
        assert back == t, repr(t)


@LAWS
@given(t=triggers(done=True, sugar=False))
def test_current_of_the_initial_state_is_the_trigger(t):
    # current(state) writes the trigger with Done(...) in place; before any transition it is
    # the trigger as written (Done(leaf) stays Done(leaf): its initial state is the tombstone)
    assert t.current(t.initial_state()) == t


@MERGE_LAWS
@given(case=merge_cases(n=2))
def test_states_survive_pickling(case):
    t, states, mctx = run_case(case)
    for s in states + [t.merge_states(states, mctx)]:
        back = pickle.loads(pickle.dumps(s))
        assert back == s
        assert t.ready(back, mctx) == t.ready(s, mctx)
        assert t.current(back) == t.current(s)


def test_strategies_cover_the_grammar():
    # a guard against vacuous properties: the tree strategy really produces every node type
    seen = set()

    @settings(max_examples=300, deadline=None)
    @given(t=triggers(done=True))
    def collect(t):
        seen.update(type(n).__name__ for n in walk(t))

    collect()
    assert {"AfterFirst", "AfterAll", "AfterEach", "Repeat", "OrFinally", "Done", "ElemCount",
            "EndOfWindow", "SinceEarliestElem", "AtPeriod", "Never"} <= seen, seen
