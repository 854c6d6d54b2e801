"""Offset restriction trackers and watermark estimators, as a runner drives them.

The central property: however a restriction is split while it is read (runner splits at any
fraction of the remainder, checkpoints, splits of residuals of residuals), the positions claimed
across the primary and every residual, each processed to completion by a new tracker, are every
position of the original range exactly once. For the growable tracker the readable end grows
while it is read; the reader checkpoints when it reaches it, and once the end is fixed the
positions claimed are exactly [start, end). Along the way: `try_split` returns contiguous parts
that make up the restriction it cut, `current_progress` adds up, `check_done` passes exactly when
nothing is left, and claims out of order raise. Beam's tracker answers a fixed list of random
op sequences the same way (when Beam's virtualenv is there).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import deque
from typing import Any, List, Optional

import pytest
from hypothesis import given, settings, strategies as st

from headrace.io.restriction_trackers import (
    OFFSET_INFINITY, GrowableOffsetRangeTracker, OffsetRange, OffsetRestrictionTracker,
)
from headrace.io.watermark_estimators import (
    ManualWatermarkEstimator, MonotonicWatermarkEstimator, WalltimeWatermarkEstimator,
)
from headrace.model.time import Timestamp
from tests.kit import _tracker_ops

FRACTIONS = st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=0.99))
BEAM_PYTHON = os.environ.get("BEAM_PYTHON") or os.path.join(
    os.path.dirname(sys.executable), os.pardir, os.pardir, ".venv-beam", "bin", "python")


def _unattempted(tracker: OffsetRestrictionTracker, nxt: int) -> bool:
    """True when the tracker's current range has positions from `nxt` on."""
    return nxt < tracker.current_restriction().stop


def _check_split(tracker: OffsetRestrictionTracker, before: OffsetRange, nxt: int,
                 parts: Optional[tuple]) -> Optional[OffsetRange]:
    """Checks a try_split answer; returns the residual (None when it did not split)."""
    if parts is None:
        assert tracker.current_restriction() == before
        return None
    primary, residual = parts
    assert primary == tracker.current_restriction()
    assert (primary.start, primary.stop, residual.stop) == (before.start, residual.start, before.stop)
    # the primary keeps every attempted position and the residual starts at or after the next
    assert residual.start >= nxt
    return residual


def _check_progress(tracker: OffsetRestrictionTracker, nxt: int, end: int) -> None:
    r = tracker.current_restriction()
    p = tracker.current_progress()
    assert p.completed_work == min(nxt, r.stop) - r.start
    assert p.completed_work + p.remaining_work == max(end, min(nxt, r.stop)) - r.start
    assert 0.0 <= p.fraction_completed <= 1.0


def _read(tracker: OffsetRestrictionTracker, data: Any, budget: List[int], claimed: List[int],
          queue: deque) -> None:
    """Reads one restriction: claims in order with splits and checkpoints drawn in between,
    until a claim fails or a checkpoint; residuals go to `queue`."""
    start = tracker.current_restriction().start
    nxt = start
    while True:
        op = data.draw(st.sampled_from(["claim"] * 4 + ["split", "checkpoint", "back", "done"])
                       if budget[0] > 0 else st.just("claim"))
        budget[0] -= 1
        _check_progress(tracker, nxt, tracker.current_restriction().stop)
        if op == "claim":
            ok = tracker.try_claim(nxt)
            assert ok == (nxt < tracker.current_restriction().stop)
            if not ok:
                tracker.check_done()
                return
            claimed.append(nxt)
            nxt += 1
        elif op in ("split", "checkpoint"):
            fraction = 0.0 if op == "checkpoint" else data.draw(FRACTIONS)
            before = tracker.current_restriction()
            parts = tracker.try_split(fraction)
            # None exactly when no position after the last attempted one is left
            assert (parts is None) == (nxt >= before.stop)
            residual = _check_split(tracker, before, nxt, parts)
            if residual is not None:
                queue.append(residual)
                if fraction == 0:
                    assert residual.start == nxt
            if op == "checkpoint":
                assert tracker.try_split(0.0) is None   # nothing is left after a checkpoint
                tracker.check_done()
                return
        elif op == "back":
            if nxt > start:
                back = data.draw(st.integers(min_value=start, max_value=nxt - 1))
                with pytest.raises(ValueError, match="increasing order"):
                    tracker.try_claim(back)
            else:
                with pytest.raises(ValueError, match="before the range"):
                    tracker.try_claim(start - 1 - data.draw(st.integers(0, 3)))
        else:
            if _unattempted(tracker, nxt):
                with pytest.raises(ValueError, match="not done"):
                    tracker.check_done()
            else:
                tracker.check_done()


@settings(max_examples=200, deadline=None)
@given(start=st.integers(min_value=0, max_value=20), size=st.integers(min_value=0, max_value=40),
       data=st.data())
def test_offset_tracker_splits_and_checkpoints_cover_every_position_once(start, size, data):
    claimed: List[int] = []
    queue = deque([OffsetRange(start, start + size)])
    budget = [data.draw(st.integers(min_value=0, max_value=60))]
    while queue:
        _read(OffsetRestrictionTracker(queue.popleft()), data, budget, claimed, queue)
    assert sorted(claimed) == list(range(start, start + size))


class _GrowingEnd:
    """The end of what is readable now: grows until it is fixed."""

    def __init__(self, end: int) -> None:
        self.end = end
        self.fixed = False

    def estimate_range_end(self) -> int:
        return self.end


def _read_growing(tracker: GrowableOffsetRangeTracker, data: Any, source: _GrowingEnd,
                  budget: List[int], claimed: List[int], queue: deque) -> None:
    """Reads what is readable of one restriction; checkpoints on reaching the readable end."""
    nxt = tracker.current_restriction().start
    while True:
        if budget[0] <= 0 and not source.fixed:
            source.fixed = True
        op = data.draw(st.sampled_from(["claim"] * 4 + ["split", "checkpoint", "grow"])
                       if budget[0] > 0 else st.just("claim"))
        budget[0] -= 1
        bounded = tracker.is_bounded()
        r = tracker.current_restriction()
        assert bounded == (r.stop != OFFSET_INFINITY)
        _check_progress(tracker, nxt, r.stop if bounded else source.end)
        if op == "grow" and not source.fixed:
            source.end += data.draw(st.integers(min_value=0, max_value=6))
        elif op == "claim":
            if not bounded and nxt >= source.end:
                op = "checkpoint"   # nothing more to read now
            else:
                ok = tracker.try_claim(nxt)
                assert ok == (nxt < r.stop)
                if not ok:
                    tracker.check_done()
                    return
                assert nxt < source.end, "a bounded part reaches past what was readable"
                claimed.append(nxt)
                nxt += 1
        if op in ("split", "checkpoint"):
            fraction = 0.0 if op == "checkpoint" else data.draw(FRACTIONS)
            parts = tracker.try_split(fraction)
            residual = _check_split(tracker, r, nxt, parts)
            if residual is not None:
                assert residual.stop == r.stop and (residual.stop == OFFSET_INFINITY) == (not bounded)
                # an unbounded range is cut within what is readable (at least one on)
                assert bounded or residual.start <= max(source.end, nxt)
                queue.append(residual)
            else:
                assert bounded and nxt >= r.stop
            if op == "checkpoint":
                tracker.check_done()
                return


@settings(max_examples=200, deadline=None)
@given(start=st.integers(min_value=0, max_value=20), readable=st.integers(min_value=0, max_value=10),
       data=st.data())
def test_growable_tracker_reads_up_to_the_final_end_exactly_once(start, readable, data):
    source = _GrowingEnd(start + readable)
    claimed: List[int] = []
    queue = deque([OffsetRange(start, OFFSET_INFINITY)])
    budget = [data.draw(st.integers(min_value=0, max_value=60))]
    tail: Optional[OffsetRange] = None
    while queue:
        r = queue.popleft()
        if r.stop == OFFSET_INFINITY:
            assert not any(q.stop == OFFSET_INFINITY for q in queue), "two unbounded parts"
            if source.fixed and r.start >= source.end:
                tail = r     # the end is final and all before it is read: stop here
                continue
        _read_growing(GrowableOffsetRangeTracker(r, source), data, source, budget, claimed, queue)
    assert tail == OffsetRange(source.end, OFFSET_INFINITY)
    assert sorted(claimed) == list(range(start, source.end))


def test_growable_tracker_measures_against_the_estimate():
    source = _GrowingEnd(10)
    tracker = GrowableOffsetRangeTracker(OffsetRange(5, OFFSET_INFINITY), source)
    assert not tracker.is_bounded()
    assert tracker.try_claim(5) and tracker.try_claim(6)
    progress = tracker.current_progress()
    assert (progress.completed_work, progress.remaining_work) == (2, 3)
    source.end = 4   # an estimate behind the reader counts as nothing left
    assert tracker.current_progress().remaining_work == 0
    assert tracker.try_split(0.5) == (OffsetRange(5, 7), OffsetRange(7, OFFSET_INFINITY))
    assert tracker.is_bounded() and not tracker.try_claim(7)
    tracker.check_done()
    with pytest.raises(ValueError, match="range end estimator"):
        GrowableOffsetRangeTracker(OffsetRange(0, OFFSET_INFINITY), 17)


def test_unbounded_tracker_is_not_done_until_checkpointed():
    tracker = GrowableOffsetRangeTracker(OffsetRange(0, OFFSET_INFINITY), lambda: 3)
    for i in range(3):
        assert tracker.try_claim(i)
    with pytest.raises(ValueError, match="not done"):
        tracker.check_done()
    assert tracker.try_split(0) == (OffsetRange(0, 3), OffsetRange(3, OFFSET_INFINITY))
    tracker.check_done()


@given(start=st.integers(0, 50), size=st.integers(0, 200), desired=st.integers(1, 60),
       minimum=st.integers(0, 60))
def test_offset_range_split_partitions_the_range(start, size, desired, minimum):
    r = OffsetRange(start, start + size)
    parts = list(r.split(desired, minimum))
    if size == 0:
        assert parts == []
        return
    assert [p.start for p in parts] == [r.start] + [p.stop for p in parts[:-1]]
    assert parts[-1].stop == r.stop
    assert all(0 < p.size() for p in parts)
    biggest = max(desired, minimum)
    # every part but the last has the chosen size; the last is never a small tail
    assert all(p.size() == biggest for p in parts[:-1])
    if len(parts) > 1:
        assert parts[-1].size() >= min(minimum, biggest) and parts[-1].size() >= desired // 4


def test_offset_range_api():
    r = OffsetRange(3, 9)
    assert r.size() == 6 and r == OffsetRange(3, 9) and hash(r) == hash(OffsetRange(3, 9))
    assert r.split_at(5) == (OffsetRange(3, 5), OffsetRange(5, 9))
    assert r.split_at(3) == (OffsetRange(3, 3), r) and r.split_at(9) == (r, OffsetRange(9, 9))
    with pytest.raises(ValueError, match="split_at"):
        r.split_at(10)
    with pytest.raises(ValueError, match="after its stop"):
        OffsetRange(4, 2)
    assert OffsetRange(0, float("inf")).stop == OFFSET_INFINITY
    tracker = r.new_tracker()
    assert (tracker.start_position(), tracker.stop_position()) == (3, 9)
    assert tracker.current_restriction() == r and tracker.is_bounded()


def test_try_split_when_nothing_remains_returns_none():
    tracker = OffsetRestrictionTracker(OffsetRange(0, 2))
    assert tracker.try_claim(0) and tracker.try_claim(1)
    assert tracker.try_split(0.0) is None and tracker.try_split(0.5) is None
    assert not tracker.try_claim(2)
    assert tracker.try_split(0.0) is None
    tracker.check_done()
    empty = OffsetRestrictionTracker(OffsetRange(4, 4))
    assert empty.try_split(0.0) is None
    empty.check_done()
    with pytest.raises(ValueError, match="fraction_of_remainder"):
        OffsetRestrictionTracker(OffsetRange(0, 5)).try_split(1.5)


def test_checkpoint_before_any_claim_gives_away_everything():
    tracker = OffsetRestrictionTracker(OffsetRange(2, 6))
    assert tracker.try_split(0.0) == (OffsetRange(2, 2), OffsetRange(2, 6))
    assert not tracker.try_claim(2)
    tracker.check_done()


def _beam_answers(seqs: List[Any]) -> List[Any]:
    python = os.path.normpath(BEAM_PYTHON)
    if not os.path.exists(python):
        pytest.skip("Beam's virtualenv (.venv-beam next to .venv) is not there")
    proc = subprocess.run([python, _tracker_ops.__file__], input=json.dumps(seqs),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def test_offset_tracker_answers_as_beams_on_random_op_sequences():
    seqs = _tracker_ops.sequences(400, seed=20260)
    ours = [_tracker_ops.run(OffsetRange, OffsetRestrictionTracker, s) for s in seqs]
    beams = _beam_answers(seqs)
    for seq, mine, theirs in zip(seqs, ours, beams):
        assert mine == theirs, f"on {seq}"


# ---- watermark estimators ------------------------------------------------------------------

@given(st.lists(st.integers(min_value=-10**6, max_value=10**6), min_size=1, max_size=30))
def test_monotonic_estimator_is_the_running_maximum(seconds):
    estimator = MonotonicWatermarkEstimator.default_provider().create_watermark_estimator(
        MonotonicWatermarkEstimator.default_provider().initial_estimator_state("e", None))
    assert estimator.current_watermark() is None
    for i, s in enumerate(seconds):
        estimator.observe_timestamp(Timestamp.of(s))
        assert estimator.current_watermark() == Timestamp.of(max(seconds[: i + 1]))
    resumed = MonotonicWatermarkEstimator(estimator.get_estimator_state())
    assert resumed.current_watermark() == Timestamp.of(max(seconds))


@given(st.lists(st.integers(min_value=0, max_value=10**6), min_size=1, max_size=30))
def test_manual_estimator_moves_only_forward(seconds):
    estimator = ManualWatermarkEstimator.default_provider().create_watermark_estimator(None)
    estimator.observe_timestamp(Timestamp.of(5))   # outputs do not move it
    assert estimator.current_watermark() is None
    high: Optional[int] = None
    for s in seconds:
        if high is not None and s < high:
            with pytest.raises(ValueError, match="back"):
                estimator.set_watermark(Timestamp.of(s))
        else:
            estimator.set_watermark(Timestamp.of(s))
            high = s
        assert estimator.current_watermark() == Timestamp.of(high)
    assert ManualWatermarkEstimator(estimator.get_estimator_state()).current_watermark() == \
        Timestamp.of(high)


def test_walltime_estimator_follows_the_clock_and_never_goes_back():
    before = Timestamp.now()
    estimator = WalltimeWatermarkEstimator.default_provider().create_watermark_estimator(None)
    first = estimator.current_watermark()
    assert before <= first <= Timestamp.now()
    estimator.observe_timestamp(Timestamp.of(0))
    assert estimator.current_watermark() >= first
    future = Timestamp.now() + 3600
    ahead = WalltimeWatermarkEstimator(future)
    assert ahead.current_watermark() == future and ahead.get_estimator_state() == future
