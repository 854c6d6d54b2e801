"""A long TestStream script on Spark streaming: Beam's leader_board shape, timed, panes checked.

    ./dev bench long_test_stream [--elements 2000] [--seed 1] [--master local[2]]

The script: `--elements` one-element steps (a user's score, each user in one of five teams),
each followed by an advance of processing time (10 s to 2 min), a watermark advance every 20
elements (trailing the event times by about three minutes; now and then an element comes
later than that: late data), then the watermark to infinity: about 2.1 events per element.
The pipeline is leader_board's (Beam's `apache_beam.examples.complete.game.leader_board`):
team scores in hourly windows with early panes every 10 minutes of processing time and a late
pane per late element (accumulating, 2 h allowed lateness), user scores in the global window
every 10 minutes of processing time (accumulating), each pane formatted with its window,
timing and index.

It runs on the local runner first (its panes are the reference), then on the Spark streaming
runner (the session started beforehand, not timed), and checks in the query that every pane
equals the local runner's (an `assert_that` per output). It prints the Spark run's wall time
and micro-batches. Before the streaming runner took a TestStream's steps a chunk at a time, one
micro-batch per step (about 0.4 s each) made such a script take many minutes.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import sys
import tempfile
import time
from typing import Any, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import headrace as beam  # noqa: E402
from headrace.options.pipeline_options import PipelineOptions  # noqa: E402
from headrace.testing.test_stream import TestStream  # noqa: E402
from headrace.testing.util import assert_that, equal_to  # noqa: E402
from headrace.transforms import trigger, window  # noqa: E402

from benchmarks._bench_env import headrace_revision  # noqa: E402

BASE_S = 1_700_000_000   # event time of the first element (seconds)
TEAMS = 5
USERS = 40


def script(elements: int, seed: int) -> TestStream:
    """The leader_board test script (see the module doc)."""
    rng = random.Random(seed)
    ts = TestStream().advance_watermark_to(BASE_S)
    now = BASE_S
    for j in range(elements):
        now += rng.randint(1, 20)
        user = rng.randrange(USERS)
        late = rng.randrange(25) == 0
        event_time = now - (rng.randint(600, 5400) if late else rng.randint(0, 60))
        ts.add_elements([beam.window.TimestampedValue(
            (f"user{user}", f"team{user % TEAMS}", rng.randint(1, 20)), event_time)])
        ts.advance_processing_time(rng.choice((10, 30, 60, 120)))
        if (j + 1) % 20 == 0:
            ts.advance_watermark_to(now - 180)
    return ts.advance_watermark_to_infinity()


class Pane(beam.DoFn):
    """A pane as a comparable tuple: key, value, window, timing, index, first, last, timestamp."""

    def process(self, kv: Any, w: Any = beam.DoFn.WindowParam, pane: Any = beam.DoFn.PaneInfoParam,
                ts: Any = beam.DoFn.TimestampParam) -> Any:
        yield (kv[0], kv[1], str(w), pane.timing.name, pane.index, pane.is_first, pane.is_last,
               int(ts.micros))


def build(p: Any, elements: int, seed: int, check: Dict[str, Any]) -> None:
    """The pipeline on `p`; `check[name]` is the matcher of output `name` (team, user)."""
    events = p | "Scores" >> script(elements, seed)
    team = (events
            | "TeamWindows" >> beam.WindowInto(
                window.FixedWindows(3600),
                trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(600),
                                               late=trigger.AfterCount(1)),
                accumulation_mode=trigger.AccumulationMode.ACCUMULATING, allowed_lateness=7200)
            | "TeamScore" >> beam.Map(lambda e: (e[1], e[2]))
            | "TeamSum" >> beam.CombinePerKey(sum)
            | "TeamPanes" >> beam.ParDo(Pane()))
    user = (events
            | "UserWindows" >> beam.WindowInto(
                window.GlobalWindows(),
                trigger=trigger.Repeatedly(trigger.AfterProcessingTime(600)),
                accumulation_mode=trigger.AccumulationMode.ACCUMULATING)
            | "UserScore" >> beam.Map(lambda e: (e[0], e[2]))
            | "UserSum" >> beam.CombinePerKey(sum)
            | "UserPanes" >> beam.ParDo(Pane()))
    assert_that(team, check["team"], label="CheckTeam")
    assert_that(user, check["user"], label="CheckUser")


def _keep(path: str) -> Any:
    def keep(panes: List[Any]) -> None:   # runs on a copy of the pipeline: kept in a file
        with open(path, "wb") as fh:
            pickle.dump(sorted(panes), fh)
    return keep


def reference(elements: int, seed: int) -> Dict[str, List[Any]]:
    """The local runner's panes of each output."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: os.path.join(tmp, name) for name in ("team", "user")}
        with beam.Pipeline(options=PipelineOptions(runner="LocalRunner")) as p:
            build(p, elements, seed, {name: _keep(path) for name, path in paths.items()})
        out = {}
        for name, path in paths.items():
            with open(path, "rb") as fh:
                out[name] = pickle.load(fh)
        return out


def spark_options(master: str, events_per_batch: int = 1000) -> PipelineOptions:
    """The Spark runner's options here (no UI, 2 shuffle partitions)."""
    return PipelineOptions(runner="SparkRunner", spark_master=master,
                           spark_conf=["spark.ui.enabled=false",
                                       "spark.sql.shuffle.partitions=2"],
                           test_stream_events_per_batch=events_per_batch)


def run_spark(elements: int, seed: int, master: str, want: Dict[str, List[Any]],
              events_per_batch: int = 1000) -> Dict[str, Any]:
    """Runs the pipeline on the Spark streaming runner, checking its panes against `want`;
    its wall time and micro-batches."""
    with beam.Pipeline(options=spark_options(master)) as p:   # starts the session: not timed
        assert_that(p | beam.Create([1]), equal_to([1]))
    p = beam.Pipeline(options=spark_options(master, events_per_batch))
    build(p, elements, seed, {name: equal_to(panes) for name, panes in want.items()})
    t0 = time.monotonic()
    result = p.run()
    result.wait_until_finish()
    seconds = time.monotonic() - t0
    batches = None
    for r in result.metrics().query()["gauges"]:
        if r.key.metric.name == "batches":
            batches = getattr(r.committed, "value", r.committed)
    return {"seconds": seconds, "batches": batches}


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--elements", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--events-per-batch", type=int, default=1000,
                    help="--test_stream_events_per_batch (1: one script step per micro-batch)")
    a = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    events = len(script(a.elements, a.seed)._events)
    print(f"long_test_stream: headrace {headrace_revision()}, {a.elements} elements, "
          f"{events} script events, seed {a.seed}, {a.master}, "
          f"--test_stream_events_per_batch {a.events_per_batch}", flush=True)
    t0 = time.monotonic()
    want = reference(a.elements, a.seed)
    print(f"  local runner: {time.monotonic() - t0:.1f} s, panes: team {len(want['team'])}, "
          f"user {len(want['user'])}", flush=True)
    got = run_spark(a.elements, a.seed, a.master, want, a.events_per_batch)
    print(f"  Spark streaming: {got['seconds']:.1f} s, {got['batches']} micro-batches, "
          "every pane equal to the local runner's", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
