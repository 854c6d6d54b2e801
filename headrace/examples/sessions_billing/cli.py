"""Running the job from the command line: flags, generating the input, running, the report.

Holds `parse_args` (the job's flags; the rest are pipeline options), `run` (generates the
input with `data.generate_events`, runs `pipeline.build_pipeline` and reads the results back
into a `JobResult`), `format_summary` (the printed report) and `main`, which
`python -m headrace.examples.sessions_billing` and `headrace demo` call.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import headrace as beam
from headrace.examples.sessions_billing.data import (DEFAULT_EVENTS, DEFAULT_SEED, DEFAULT_USERS, KINDS,
                                                     fmt_time, generate_events)
from headrace.examples.sessions_billing.pipeline import (NAMESPACE, OUTPUTS, build_pipeline, output_paths,
                                                         read_output)
from headrace.metrics import MetricsFilter
from headrace.options.pipeline_options import PipelineOptions


@dataclasses.dataclass
class JobResult:
    """The numbers the job reports (read back from its metrics and output files)."""

    runner: str
    workdir: str
    input_files: List[str]
    lines_read: int
    events: int
    events_by_kind: Dict[str, int]
    malformed: int
    sessions: int
    users: int
    mean_session_length_s: float
    total_watch_secs: int
    total_revenue_micros: int
    hours_with_revenue: int
    busiest_hour_start_us: Optional[int]
    busiest_hour_revenue_micros: int
    top_users: List[Dict[str, Any]]
    output_files: List[str]
    generate_time_s: float
    wall_time_s: float

    @property
    def events_per_s(self) -> float:
        """Lines read per second of pipeline wall time."""
        return self.lines_read / self.wall_time_s if self.wall_time_s > 0 else 0.0


def _counters(result: Any) -> Dict[str, int]:
    totals: Dict[str, int] = {}
    try:
        counters = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    except Exception:  # a runner without metrics: report what the output files say
        return totals
    for c in counters:
        totals[c.key.metric.name] = totals.get(c.key.metric.name, 0) + c.committed
    return totals


def _clear_outputs(output_dir: str) -> None:
    for name in OUTPUTS:
        for path in output_paths(output_dir, name):
            os.remove(path)


def parse_args(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None
               ) -> Tuple[argparse.Namespace, List[str]]:
    """The job's own flags, and the remaining flags (passed on as pipeline options)."""
    parser = argparse.ArgumentParser(
        prog=prog or "python -m headrace.examples.sessions_billing",
        description="Video sessions and ad billing over generated event logs: the Dataflow Model "
                    "paper's motivating examples as one headrace pipeline. Other --flags are "
                    "passed on as pipeline options.")
    parser.add_argument("--events", type=int, default=DEFAULT_EVENTS,
                        help=f"events to generate (default {DEFAULT_EVENTS:,})")
    parser.add_argument("--users", type=int, default=DEFAULT_USERS,
                        help=f"distinct users (default {DEFAULT_USERS:,})")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed of the generator")
    parser.add_argument("--workdir", default=None,
                        help="directory for input/ and output/ (default: a new temporary directory; "
                             "earlier events-*.jsonl inputs and job outputs in it are replaced)")
    parser.add_argument("--runner", default="SparkRunner",
                        help="SparkRunner (the default: embedded Spark, local[*]; --spark_master=URL "
                             "for a cluster) or LocalRunner")
    parser.add_argument("--bundle_size", type=int, default=1000,
                        help="elements per bundle (default 1000)")
    return parser.parse_known_args(argv)


def run(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> JobResult:
    """Generates the input, runs the pipeline and returns what it computed."""
    args, extra = parse_args(argv, prog)
    workdir = args.workdir or tempfile.mkdtemp(prefix="headrace-sessions-billing-")
    input_dir = os.path.join(workdir, "input")
    output_dir = os.path.join(workdir, "output")
    t0 = time.perf_counter()
    generated = generate_events(input_dir, args.events, args.users, args.seed)
    generate_time = time.perf_counter() - t0
    os.makedirs(output_dir, exist_ok=True)
    _clear_outputs(output_dir)

    options = PipelineOptions([f"--runner={args.runner}", f"--bundle_size={args.bundle_size}",
                               *extra])
    p = beam.Pipeline(options=options)
    build_pipeline(p, os.path.join(input_dir, "events-*.jsonl"), output_dir)
    t0 = time.perf_counter()
    result = p.run()
    result.wait_until_finish()
    wall = time.perf_counter() - t0

    counters = _counters(result)
    summary = (read_output(output_dir, "session_summary") or [{}])[0]
    hourly = read_output(output_dir, "revenue_by_hour")
    busiest = (read_output(output_dir, "busiest_hour") or [[]])[0]
    top = (read_output(output_dir, "top_users") or [[]])[0]
    malformed = read_output(output_dir, "dead_letters")
    users = read_output(output_dir, "user_stats")
    outputs = sorted(f for name in OUTPUTS for f in output_paths(output_dir, name))
    return JobResult(
        runner=args.runner, workdir=workdir, input_files=generated.paths,
        lines_read=counters.get("lines_read", generated.events + generated.malformed),
        events=sum(counters.get(f"events_{k}", 0) for k in KINDS) if counters else generated.events,
        events_by_kind={k: counters.get(f"events_{k}", 0) for k in KINDS},
        malformed=counters.get("malformed_lines", len(malformed)),
        sessions=counters.get("sessions", summary.get("sessions", 0)),
        users=len(users),
        mean_session_length_s=summary.get("mean_length_s", 0.0),
        total_watch_secs=summary.get("watch_secs", 0),
        total_revenue_micros=sum(h["revenue_micros"] for h in hourly),
        hours_with_revenue=len(hourly),
        busiest_hour_start_us=busiest[0]["hour_us"] if busiest else None,
        busiest_hour_revenue_micros=busiest[0]["revenue_micros"] if busiest else 0,
        top_users=top, output_files=outputs, generate_time_s=generate_time, wall_time_s=wall)


def _dollars(micros: int) -> str:
    return f"${micros / 1e6:,.2f}"


def format_summary(r: JobResult) -> str:
    """The job's results as a readable report."""
    out = [f"headrace sessions & billing ({r.runner})",
           f"  input       {r.lines_read:,} lines in {len(r.input_files)} files, generated in "
           f"{r.generate_time_s:.1f} s: {os.path.join(r.workdir, 'input')}",
           f"  events      {r.events:,} parsed: "
           + ", ".join(f"{n:,} {k.replace('_', ' ')}s" for k, n in r.events_by_kind.items()),
           f"  malformed   {r.malformed} lines went to the dead-letter output (dead_letters-*.jsonl)",
           f"  sessions    {r.sessions:,} sessions of {r.users:,} users (30-minute gap), mean length "
           f"{r.mean_session_length_s / 60:.1f} min, {r.total_watch_secs / 3600:,.1f} h watched"]
    if r.busiest_hour_start_us is not None:
        start = fmt_time(r.busiest_hour_start_us)
        out.append(f"  ad revenue  {_dollars(r.total_revenue_micros)} over {r.hours_with_revenue} hours; "
                   f"busiest hour {start[:10]} {start[11:16]} UTC: "
                   f"{_dollars(r.busiest_hour_revenue_micros)}")
    out.append("  top users by watch time")
    for i, u in enumerate(r.top_users, 1):
        out.append(f"    {i}. {u['user']}  {u['watch_secs'] / 3600:.1f} h in {u['sessions']} sessions "
                   f"(avg {u['avg_session_length_s'] / 60:.1f} min)")
    out.append(f"  output      {os.path.join(r.workdir, 'output')}")
    for f in r.output_files:
        out.append(f"    {os.path.basename(f)}  ({os.path.getsize(f):,} bytes)")
    out.append(f"  wall time   {r.wall_time_s:.1f} s for the pipeline, {r.events_per_s:,.0f} events/s")
    return "\n".join(out)


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Runs the job and prints its summary; returns the exit code."""
    try:
        result = run(argv, prog)
    except beam.HeadraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_summary(result))
    return 0
