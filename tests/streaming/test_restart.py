"""Crash and restart: a streaming job killed with SIGKILL, then restarted on its checkpoint,
writes exactly what a run without a crash writes (nothing lost, nothing written twice), for a
grouping and for a stateful DoFn with state and timers.

Each run is a subprocess (`_restart_job.py`) with its own checkpoint directory; the crash-free
run's output is the reference (files per window and pane, and their lines).
"""

from __future__ import annotations

import os
import signal
import sys

import pytest

from tests._support import batches_done, run_job, visible_files
from tests.conftest import RUNNERS

JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_restart_job.py")


# The jobs run the Spark streaming runner on local[2] in subprocesses of their own, so the test
# takes no `runner` parameter (the reference run is then made once, not once per runner).
pytestmark = pytest.mark.skipif(
    "spark-local" not in RUNNERS,
    reason="the crash test runs the Spark runner on local[2]; spark-local is not in "
           "HEADRACE_TEST_RUNNERS")


def _run(out, ckpt, *flags, kill_at_batch=None):
    return run_job(JOB, [out, ckpt, *flags], ckpt, kill_at_batch)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    base = tmp_path_factory.mktemp("reference")
    code, err = _run(base / "out", base / "ckpt")
    assert code == 0, err[-3000:]
    files = visible_files(base / "out")
    assert len([f for f in files if f.startswith("sums")]) > 8   # several windows, early panes
    _check_stateful_output(files)
    return files


def _check_stateful_output(files):
    """The stateful DoFn's lines (the job's `state-*` files, one per window): each value flushed
    exactly once, by its processing-time timer or at the window's end, and per key and window
    the total (sum and count) of the values the job's PeriodicImpulse gives it."""
    lines = [ln for name, got in files.items() if name.startswith("state") for ln in got]
    assert len([f for f in files if f.startswith("state")]) == 8   # 240 s in 30 s windows
    flushed = sorted(tuple(ln.split()[1:]) for ln in lines if ln.startswith("flush "))
    assert flushed == sorted(("k%d" % (v % 3), str(v)) for v in range(240))
    totals = sorted(ln for ln in lines if ln.startswith("total "))
    expected = {}
    for v in range(240):
        s, n = expected.get(("k%d" % (v % 3), v // 30 * 30), (0, 0))
        expected[("k%d" % (v % 3), v // 30 * 30)] = (s + v, n + 1)
    assert totals == sorted("total %s %d %d %d" % (k, start, s, n)
                            for (k, start), (s, n) in expected.items())


def test_a_job_killed_at_several_points_resumes_with_exactly_once_output(reference, tmp_path):
    # One job, killed twice, each time restarted on its checkpoint: while a batch's elements
    # pass a stage; right after the sink renamed a pane's file, before the batch committed (in
    # the batch the first restart replays). (Kills from outside at random points are the quick
    # chaos run's, tests/streaming/test_chaos.py, and the splittable DoFn's test below.)
    out, ckpt, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "marker"
    marker.mkdir()
    for how in ("mid-batch", "after-write"):
        code, err = _run(out, ckpt, "--kill", how, "--marker", str(marker))
        assert how in os.listdir(marker), err[-3000:]   # the kill happened
        assert code == -signal.SIGKILL, err[-3000:]
    code, err = _run(out, ckpt)   # the last restart runs to the end
    assert code == 0, err[-3000:]
    assert visible_files(out) == reference


# ---- a splittable DoFn --------------------------------------------------------------

SDF_JOB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_sdf_restart_job.py")


def _run_sdf(out, ckpt, journal, *flags, kill_at_batch=None):
    return run_job(SDF_JOB, [out, ckpt, journal, *flags], ckpt, kill_at_batch)


def test_a_splittable_dofn_killed_mid_run_resumes_its_restrictions_exactly_once(tmp_path):
    # The SDF's live restrictions are in the state store: a restart on the checkpoint replays
    # the uncommitted batch from them, so every position is read again only if that batch had
    # read it, and written exactly once.
    sys.path.insert(0, os.path.dirname(SDF_JOB))
    try:
        import _sdf_restart_job as job
    finally:
        sys.path.pop(0)
    out, ckpt, journal, marker = tmp_path / "out", tmp_path / "ckpt", tmp_path / "journal", tmp_path / "m"
    marker.mkdir()
    kill_at = job.LENGTH // 2 + 1   # in the middle of a call (of a micro-batch)
    code, err = _run_sdf(out, ckpt, journal, "--kill-at", str(kill_at), "--marker", str(marker))
    assert os.listdir(marker) == ["killed"] and code == -signal.SIGKILL, err[-3000:]
    code, err = _run_sdf(out, ckpt, journal, kill_at_batch=batches_done(ckpt) + 2)
    assert code == -signal.SIGKILL, err[-3000:]
    code, err = _run_sdf(out, ckpt, journal)
    assert code == 0, err[-3000:]

    positions = [(e, p) for e in job.ELEMENTS for p in range(job.LENGTH)]
    lines = sorted(ln for got in visible_files(out).values() for ln in got)
    assert lines == sorted(str(e * 1000 + p) for e, p in positions)   # exactly once
    by_run = {}   # by driver process: one per run
    for ln in journal.read_text().splitlines():
        pid, e, p = map(int, ln.split())
        by_run.setdefault(pid, []).append((e, p))
    assert len(by_run) == 3
    claimed = [c for cs in by_run.values() for c in cs]
    assert sorted(set(claimed)) == positions
    for e, per_batch in zip(job.ELEMENTS, (job.CLAIMS, job.BUDGET)):
        # each of the two restarts re-reads at most what one batch read (the uncommitted one's)
        again = [p for (el, p) in claimed if el == e]
        assert len(again) - job.LENGTH <= 2 * per_batch, sorted(again)
        assert len(again) >= job.LENGTH
    first = set(list(by_run.values())[0])
    assert (1, kill_at) in first and len(first) < len(positions)   # it was killed mid-run
