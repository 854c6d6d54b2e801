"""Running the job from the command line: flags, generating the input, running, the report.

Holds `parse_args` (the job's flags; the rest are pipeline options), `run` (generates the
input with `data.generate_events`, runs `pipeline.build_pipeline` and reads the results back
into a `JobResult`), `format_summary` (the printed report) and `main`, which
`python -m headrace.examples.sessions_billing` and `headrace demo` call.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import glob
import os
import sys
import tempfile
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import headrace as beam
from headrace import window
from headrace.errors import PipelineExecutionError
from headrace.examples.sessions_billing.data import (DAY_START_US, DEFAULT_EVENTS, DEFAULT_SEED,
                                                     DEFAULT_USERS, HOUR_S, KINDS, fmt_time,
                                                     generate_events, generate_lines, stream_plan,
                                                     write_stream)
from headrace.examples.sessions_billing.pipeline import (NAMESPACE, OUTPUTS, build_pipeline,
                                                         build_streaming, output_paths, parse_event,
                                                         read_output)
from headrace.io.textio import ReadFromTextContinuously
from headrace.metrics import MetricsFilter
from headrace.options.pipeline_options import PipelineOptions

STREAM_EVENTS = 100_000      # --streaming's default --events
EARLY_S = 1.0                # --streaming: early panes every second of processing time
LATENESS_S = 3 * HOUR_S      # --streaming: allowed lateness (lines 2 hours late are kept,
                             # lines 6 hours late dropped)
QUEUE_IDLE_S = 60.0          # --source redis|kafka: the read ends after this long without news
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
DEFAULT_PG_DSN = "postgresql://postgres@127.0.0.1:5432/test"


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
    parser.add_argument("--events", type=int, default=None,
                        help=f"events to generate (default {DEFAULT_EVENTS:,}; with --streaming "
                             f"{STREAM_EVENTS:,})")
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
    parser.add_argument("--streaming", action="store_true",
                        help="run the streaming variant: the log arrives as files in a directory "
                             "while the job runs (on Spark: one Structured Streaming query), with "
                             "early, on-time and late panes; --events defaults to "
                             f"{STREAM_EVENTS:,} then")
    parser.add_argument("--files", type=int, default=24,
                        help="--streaming: the number of log files the day arrives in, one read "
                             "(micro-batch) each; a multiple of 12 (default 24: an hour of the "
                             "log per file)")
    parser.add_argument("--interval", type=float, default=0.5,
                        help="--streaming: seconds between two log files (default 0.5)")
    parser.add_argument("--source", choices=("files", "redis", "kafka"), default="files",
                        help="--streaming: where the log arrives: files in a directory (the "
                             "default; the panes go to files), a Redis stream (redis) or a Kafka "
                             "topic (kafka), a burst of entries per file, the next once the job "
                             "has read the last; the panes then go to PostgreSQL (--pg_dsn)")
    parser.add_argument("--redis_url", default=DEFAULT_REDIS_URL,
                        help=f"--source redis: the server (default {DEFAULT_REDIS_URL}); the "
                             "stream is named per run")
    parser.add_argument("--kafka_bootstrap", default=None,
                        help="--source kafka: the cluster's bootstrap servers (default: start "
                             "librdkafka's mock cluster in this process); the topic is named per run")
    parser.add_argument("--pg_dsn", default=DEFAULT_PG_DSN,
                        help=f"--source redis|kafka: the PostgreSQL database the panes go to "
                             f"(default {DEFAULT_PG_DSN})")
    parser.add_argument("--stop_after_idle", type=float, default=QUEUE_IDLE_S, metavar="SECONDS",
                        help="--source redis|kafka: the read ends once no entry came for this long "
                             f"(default {QUEUE_IDLE_S:.0f}; bursts come two micro-batches apart on "
                             "Spark, so more on a busy machine)")
    parser.add_argument("--pg_tables", default=None, metavar="PREFIX",
                        help="--source redis|kafka: the tables PREFIX_revenue and PREFIX_sessions "
                             "(replaced if they exist; default: named per run, demo_<random>)")
    args, extra = parser.parse_known_args(argv)
    if args.files < 12 or args.files % 12:
        parser.error(f"--files={args.files}: give a multiple of 12 (late lines come 2 hours late, "
                     "too-late ones 6 hours, in whole files)")
    if args.source != "files" and not args.streaming:
        parser.error(f"--source {args.source} goes with --streaming")
    if args.events is None:
        args.events = STREAM_EVENTS if args.streaming else DEFAULT_EVENTS
    return args, extra


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


# ---------------------------------------------------------------------------------------
# --streaming


@dataclasses.dataclass
class TableReport:
    """What the queue sources' run left in PostgreSQL: the tables and the printed query."""

    revenue_table: str
    sessions_table: str
    query: str
    rows: List[Tuple[str, int, int]]    # (hour, advertisers, revenue in micro-dollars)
    revenue_rows: int
    session_rows: int


@dataclasses.dataclass
class StreamResult:
    """What the streaming variant reports (read back from its metrics and output files)."""

    runner: str
    workdir: str
    files: int
    lines: int
    late_lines: int
    too_late_lines: int
    panes: Dict[str, Dict[str, int]]        # "session" / "revenue" -> timing -> panes
    dropped_late: int
    malformed: int
    story: List[Dict[str, Any]]             # the panes of the revenue window with the most panes
    final_revenue_micros: int               # the sum of every revenue window's last pane
    expected_revenue_micros: int            # the log's ad revenue without the too-late lines
    wall_time_s: float
    source: str = "files"
    feed: str = ""                          # where the log went (a directory, stream or topic)
    tables: Optional[TableReport] = None    # --source redis|kafka: the PostgreSQL output
    last_panes: Dict[Tuple[str, int], int] = dataclasses.field(default_factory=dict)


def line_time(line: str) -> Any:
    """A log line's event time for the source's watermark; the start of the day for a line
    that is no valid event (it goes to the dead letters, and a wrong time in it, such as a
    line of the wrong kind with a time hours ahead, must not move the watermark)."""
    try:
        return window.Timestamp(micros=parse_event(line).ts_us)
    except Exception:
        return window.Timestamp(micros=DAY_START_US)


def _ad_revenue(lines: Sequence[str]) -> int:
    total = 0
    for line in lines:
        try:
            e = parse_event(line)
        except Exception:
            continue
        total += e.price_micros
    return total


def _feed(args: argparse.Namespace, name: str) -> Any:
    """The queue the log goes through (--source redis|kafka)."""
    from headrace.examples.sessions_billing.queues import KafkaFeed, RedisFeed
    if args.source == "redis":
        return RedisFeed(args.redis_url, name)
    return KafkaFeed(args.kafka_bootstrap, name)


def run_streaming(args: argparse.Namespace, extra: List[str]) -> StreamResult:
    """Writes the log into input/ file by file (or with --source redis|kafka into a stream or
    topic, burst by burst) while the streaming job reads it; returns what the job computed once
    the log has stopped growing."""
    from headrace.examples.sessions_billing.queues import BatchPacer, ResultTables, run_name
    workdir = args.workdir or tempfile.mkdtemp(prefix="headrace-sessions-billing-stream-")
    input_dir = os.path.join(workdir, "input")
    output_dir = os.path.join(workdir, "output")
    for d in (input_dir, output_dir):
        os.makedirs(d, exist_ok=True)
        for old in glob.glob(os.path.join(d, "*.jsonl")):
            os.remove(old)
    lines = generate_lines(args.events, args.users, args.seed)
    # late lines come 2 hours late (kept: 3 h of allowed lateness), too-late ones 6 hours late
    plan = stream_plan(lines, args.files, late_by=args.files // 12, too_late_by=args.files // 4)
    name = run_name()
    pacer = BatchPacer(None)
    if args.source != "files" and "Spark" in args.runner:
        extra, pacer = _paced(extra, workdir, name)
    options = PipelineOptions([f"--runner={args.runner}", f"--bundle_size={args.bundle_size}",
                               "--streaming", *extra])
    p = beam.Pipeline(options=options)
    idle_s = max(5.0, 4 * args.interval)
    feed: Any = None
    tables: Optional[ResultTables] = None
    if args.source == "files":
        log = p | "ReadLog" >> ReadFromTextContinuously(
            os.path.join(input_dir, "events-*.jsonl"), poll_interval=min(0.2, args.interval),
            timestamp_fn=line_time, watermark_delay=60, stop_after_idle=idle_s,
            max_files_per_read=1)
        write: Any = functools.partial(write_stream, input_dir, plan, args.interval)
        where = input_dir
    else:
        tables = ResultTables(args.pg_dsn, args.pg_tables or name)
        tables.create()   # fails first, naming the server, if PostgreSQL is not there
        feed = _feed(args, name)
        feed.prepare()
        # a burst waits for two micro-batches after the last: longer gaps than between files
        log = feed.read(p, max(len(c) for _, c in plan.files), args.stop_after_idle)
        write = functools.partial(feed.write, plan, args.interval, pacer)
    build_streaming(log, output_dir, EARLY_S, LATENESS_S, tables)
    if feed is not None:
        where = feed.describe()   # (the Kafka cluster's address known once it is started)
    stop = threading.Event()
    failures: List[BaseException] = []
    completed = threading.Event()   # set when the writer wrote the whole log before `stop`
    writer = threading.Thread(target=_catching(write, failures, stop, completed), args=(stop,),
                              name="log-shipper", daemon=True)
    t0 = time.perf_counter()
    writer.start()
    try:
        result = p.run()
        result.wait_until_finish()
    finally:
        stop.set()
        writer.join()
    wall = time.perf_counter() - t0
    if failures:
        raise failures[0]
    if feed is not None and not completed.is_set():
        raise PipelineExecutionError(
            f"sessions-billing demo: the job stopped reading {where} before the log's last burst "
            f"was written (its read ends after {args.stop_after_idle:.0f} s without new entries, and the "
            "writer waits for the job to read a burst and, on Spark, for two more micro-batches); "
            "on a machine this busy give --stop_after_idle=SECONDS, more than two micro-batches")
    revenue = read_output(output_dir, "revenue_panes") if tables is None else tables.revenue_panes()
    return _stream_result(args, workdir, result, plan, lines, revenue, wall, where,
                          _report(tables))


def _paced(extra: List[str], workdir: str, name: str) -> Tuple[List[str], Any]:
    """The pipeline flags with the query's checkpoint (`--checkpoint_location`, a new directory
    in `workdir` unless given), and the `BatchPacer` watching its commit log (none on a Spark
    Connect server, whose checkpoint is not on this machine)."""
    from headrace.examples.sessions_billing.queues import BatchPacer
    flags = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    flags.add_argument("--checkpoint_location")
    flags.add_argument("--spark_remote")
    given, _ = flags.parse_known_args(extra)
    if given.spark_remote:
        return extra, BatchPacer(None)
    checkpoint = given.checkpoint_location or os.path.join(workdir, f"checkpoint-{name}")
    if not given.checkpoint_location:
        extra = [*extra, f"--checkpoint_location={checkpoint}"]
    return extra, BatchPacer(os.path.join(checkpoint, "spark"))


def _catching(fn: Any, failures: List[BaseException], stop: threading.Event,
              completed: threading.Event) -> Any:
    """`fn`, keeping what it raises in `failures` (the writer thread's error, raised after
    the job), and setting `completed` if it returned before `stop` was set (it wrote the whole
    log)."""
    def run(*args: Any) -> None:
        try:
            fn(*args)
            if not stop.is_set():
                completed.set()
        except BaseException as exc:  # re-raised by run_streaming
            failures.append(exc)
    return run


def _report(tables: Any) -> Optional[TableReport]:
    if tables is None:
        return None
    rows, revenue_rows, session_rows = tables.run_query()
    return TableReport(tables.revenue, tables.sessions, tables.hourly_query(), rows,
                       revenue_rows, session_rows)


def _stream_result(args: argparse.Namespace, workdir: str, result: Any, plan: Any, lines: List[str],
                   revenue: List[Dict[str, Any]], wall: float, where: str,
                   tables: Optional[TableReport]) -> StreamResult:
    counters = _counters(result)
    panes = {name: {t: counters.get(f"{name}_panes_{t.lower()}", 0)
                    for t in ("EARLY", "ON_TIME", "LATE")} for name in ("session", "revenue")}
    by_window: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
    for r in revenue:
        by_window.setdefault((r["key"], r["window_us"]), []).append(r)
    last = {k: max(ps, key=lambda r: r["index"])["value"] for k, ps in by_window.items()}
    story = max(by_window.values(), default=[],  # a window with every timing, the largest sum
                key=lambda ps: (len({r["timing"] for r in ps}), max(r["value"] for r in ps)))
    return StreamResult(
        runner=args.runner, workdir=workdir, files=len(plan.files), lines=len(lines),
        late_lines=plan.late, too_late_lines=len(plan.too_late), panes=panes,
        dropped_late=_dropped(result), malformed=counters.get("malformed_lines", 0),
        story=sorted(story, key=lambda r: r["index"]),
        final_revenue_micros=sum(last.values()),
        expected_revenue_micros=_ad_revenue(lines) - _ad_revenue(plan.too_late),
        wall_time_s=wall, source=args.source, feed=where, tables=tables, last_panes=last)


def _dropped(result: Any) -> int:
    try:
        found = result.metrics().query(
            MetricsFilter().with_namespace("headrace").with_name("dropped_late_elements"))
    except Exception:
        return 0
    return sum(c.committed for c in found["counters"])


def format_streaming(r: StreamResult) -> str:
    """The streaming variant's results as a readable report."""
    def counts(name: str) -> str:
        c = r.panes[name]
        return f"{c['EARLY']:,} early, {c['ON_TIME']:,} on time, {c['LATE']:,} late"

    files = (f"{r.files} files in {r.feed}" if r.source == "files"
             else f"{r.files} bursts (one a file of the file demo) to {r.feed}")
    out = [f"headrace sessions & billing, streaming ({r.runner}, --source {r.source})",
           f"  input      {r.lines:,} lines arrived in {files}; {r.late_lines} lines came 2 hours "
           f"late, {r.too_late_lines} 6 hours late",
           f"  panes      sessions: {counts('session')}",
           f"             hourly revenue: {counts('revenue')}",
           f"  dropped    {r.dropped_late} late elements beyond the {LATENESS_S // 3600} h allowed "
           "lateness (counter headrace/dropped_late_elements, once per grouping)",
           f"  malformed  {r.malformed} lines went to the dead-letter output"]
    if r.story:
        first = r.story[0]
        out.append(f"  one window, pane by pane: {first['key']}, {first['window'][0][:16]} to "
                   f"{first['window'][1][11:16]} UTC (accumulating)")
        for pane in r.story:
            out.append(f"    #{pane['index']} {pane['timing']:<8} {_dollars(pane['value']):>10}"
                       + ("  (last)" if pane["last"] else ""))
    verdict = "equal" if r.final_revenue_micros == r.expected_revenue_micros else "DIFFERENT"
    out.append(f"  revenue    {_dollars(r.final_revenue_micros)} in the windows' last panes; the log "
               f"without its too-late lines: {_dollars(r.expected_revenue_micros)} ({verdict})")
    if r.tables is None:
        out.append(f"  output     {os.path.join(r.workdir, 'output')} (a file per window and pane)")
    else:
        out.extend(_format_tables(r, r.tables))
    out.append(f"  wall time  {r.wall_time_s:.1f} s")
    return "\n".join(out)


def _format_tables(r: StreamResult, t: TableReport) -> List[str]:
    """The PostgreSQL part of the report: the tables, the query and its result, the checks."""
    emitted = sum(r.panes["revenue"].values())
    once = "each once" if t.revenue_rows == emitted else "NOT each once"
    out = [f"  output     PostgreSQL: {t.revenue_table} ({t.revenue_rows:,} rows, a pane each: the "
           f"job emitted {emitted:,} revenue panes, {once}), {t.sessions_table} "
           f"({t.session_rows:,} session panes); dead letters in {os.path.join(r.workdir, 'output')}",
           "  query      revenue per hour from each advertiser-hour's latest pane:"]
    out.extend("    " + line for line in t.query.splitlines())
    out.append(f"    {'hour':>5}  {'advertisers':>11}  {'revenue':>12}")
    for hour, advertisers, micros in t.rows:
        out.append(f"    {hour:>5}  {advertisers:>11}  {_dollars(micros):>12}")
    total = sum(m for _, _, m in t.rows)
    verdict = "equal" if total == r.expected_revenue_micros else "DIFFERENT"
    out.append(f"    total {_dollars(total)} over {len(t.rows)} hours; the log without its too-late "
               f"lines: {_dollars(r.expected_revenue_micros)} ({verdict}: the file demo's check, "
               "on the table)")
    return out


def main(argv: Optional[Sequence[str]] = None, prog: Optional[str] = None) -> int:
    """Runs the job (or with --streaming its streaming variant) and prints its summary; returns
    the exit code."""
    try:
        args, extra = parse_args(argv, prog)
        if args.streaming:
            print(format_streaming(run_streaming(args, extra)))
            return 0
        result = run(argv, prog)
    except beam.HeadraceError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(format_summary(result))
    return 0
