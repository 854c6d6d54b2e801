"""The chaos benchmark's quick variant (benchmarks/chaos.py --quick) on Redis: a windowed
streaming job into PostgreSQL, 10 faults at seeded random points while a generator writes
(2 kill -9 of the driver with restarts on the checkpoint, 2 each of: kill -9 of a Python worker,
Redis stopped for seconds, PostgreSQL stopped for seconds, closed client sockets); its pane
table must equal, row for row, the table of a fault-free run over the same events. It takes
3-5 minutes, so it runs only with HEADRACE_CHAOS=1 (and spark-local in HEADRACE_TEST_RUNNERS)."""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

from tests._postgres import server_bin
from tests.conftest import RUNNERS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif("spark-local" not in RUNNERS,
                       reason="the chaos test runs the Spark runner on local[2]; spark-local is not "
                              "in HEADRACE_TEST_RUNNERS"),
    # 175-300 s on a 2-vCPU machine shared with other jobs (four Spark start-ups): not by default
    pytest.mark.skipif(os.environ.get("HEADRACE_CHAOS") != "1",
                       reason="the quick chaos run takes 3-5 minutes; set HEADRACE_CHAOS=1 to run it"),
]


def test_the_quick_chaos_run_on_redis_loses_duplicates_and_invents_no_pane(capsys, monkeypatch):
    pytest.importorskip("redis", reason="pip install 'headrace[redis]'")
    pytest.importorskip("psycopg", reason="pip install 'headrace[postgres]'")
    pytest.importorskip("psutil", reason="pip install psutil (the test extra)")
    if not shutil.which("redis-server") or server_bin() is None:
        pytest.skip("needs redis-server and PostgreSQL (apt-get install redis-server postgresql)")
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    sys.path.insert(0, REPO)
    from benchmarks import chaos
    code = chaos.main(["--source", "redis", "--quick", "--seed", "1"])
    out = capsys.readouterr().out
    assert code == 0, out[-4000:]
    assert re.search(r"faults injected 10 \(", out), out[-4000:]
    panes = re.search(r"panes (\d+) in the reference .*, (\d+) in the faulty run: lost (\d+), "
                      r"duplicated (\d+), extra (\d+); latest-pane rows \d+, equal", out)
    assert panes, out[-4000:]
    total, got, lost, dup, extra = map(int, panes.groups())
    assert total > 0 and got == total and (lost, dup, extra) == (0, 0, 0)
