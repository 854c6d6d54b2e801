"""Video sessions and ad billing: the Dataflow Model paper's motivating examples, for real.

The job generates a day of event logs for a video site (JSON lines, a fixed random seed, two
million events by default): users watch videos (`view`, seconds watched) and are shown ads
(`ad_impression`, `ad_click`, each billed to an advertiser at a price). A handful of
malformed lines are mixed in on purpose. Then one pipeline:

1. reads the files with `ReadFromText` and parses each line; lines that fail to parse go to
   a dead-letter output (`.with_exception_handling()`), are counted and written out;
2. gives each event its event time (`TimestampedValue`);
3. (a) groups each user's activity into sessions (`Sessions`, 30 minutes of inactivity
   closes one) and summarises every session with a `CombineFn`: events, watch time, length;
   then per user: number of sessions, total watch time, average session length;
4. (b) sums ad revenue per advertiser and per hour (`FixedWindows` of one hour,
   `CombinePerKey(sum)`), and over all advertisers per hour;
5. (c) finds the top 5 users by watch time (`combiners.Top`);
6. writes every result as JSON lines with `WriteToText` and prints a summary.

It runs on embedded Spark by default (`--runner=SparkRunner`, Spark's local mode with one
worker thread per core; `--spark_master=URL` runs it on a cluster, `--runner=LocalRunner` on
the local reference runner). Run it with `python -m headrace.examples.sessions_billing --help`
(or `./dev demo`).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import glob
import json
import os
import random
import sys
import tempfile
import time
from typing import Any, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

import headrace as beam
from headrace import combiners, window
from headrace.metrics import MetricsFilter
from headrace.options.pipeline_options import PipelineOptions

NAMESPACE = "sessions_billing"
SESSION_GAP_S = 30 * 60
HOUR_S = 60 * 60
KINDS = ("view", "ad_impression", "ad_click")
DEFAULT_EVENTS = 2_000_000
DEFAULT_USERS = 20_000
DEFAULT_SEED = 2015
DAY_START = _dt.datetime(2024, 5, 1, tzinfo=_dt.timezone.utc)
DAY_START_US = int(DAY_START.timestamp()) * 1_000_000
DAY_US = 24 * HOUR_S * 1_000_000
ADVERTISERS = tuple(f"adv-{i:02d}" for i in range(1, 13))

# Lines that must not parse: broken JSON, missing or wrong fields, impossible values.
MALFORMED_LINES = (
    '{"user": "u00001", "time": "2024-05-01T10:00:00.000Z", "kind": "view", "secs": ',
    "this is not json at all",
    '{"user": "u00002", "time": "2024-05-01T25:61:00.000Z", "kind": "view", "secs": 30}',
    '{"user": "u00003", "time": "2024-05-01T11:00:00.000Z", "kind": "purchase", "secs": 30}',
    '{"user": "u00004", "time": "2024-05-01T12:00:00.000Z", "kind": "view", "secs": -5}',
    '{"user": "u00005", "time": "2024-05-01T13:00:00.000Z", "kind": "ad_click"}',
    '{"time": "2024-05-01T14:00:00.000Z", "kind": "view", "secs": 12}',
    "[1, 2, 3]",
)


class Event(NamedTuple):
    """One parsed log line. `price_micros` is in millionths of a dollar (0 for views)."""

    user: str
    ts_us: int
    kind: str
    secs: int
    advertiser: str
    price_micros: int


class SessionRecord(NamedTuple):
    """One session of one user: its merged window, events, watch time and length."""

    user: str
    window_start_us: int
    window_end_us: int
    events: int
    watch_secs: int
    first_us: int
    last_us: int

    @property
    def length_us(self) -> int:
        """The time from the session's first to its last event."""
        return self.last_us - self.first_us


class GeneratedInput(NamedTuple):
    """What `generate_events` wrote."""

    paths: List[str]
    events: int
    malformed: int


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


# ---------------------------------------------------------------------------------------
# input generation


def _fmt_time(ts_us: int) -> str:
    dt = DAY_START + _dt.timedelta(microseconds=ts_us - DAY_START_US)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def generate_events(input_dir: str, n_events: int = DEFAULT_EVENTS, n_users: int = DEFAULT_USERS,
                    seed: int = DEFAULT_SEED, n_files: int = 4) -> GeneratedInput:
    """Writes `n_events` events of one day (plus `MALFORMED_LINES`) to `n_files` JSON-lines files.

    Users come back in bursts of activity (a few to a few dozen events, minutes apart); some
    users are far more active than others. The files split the day's log in time order, like
    rotated logs. The same arguments always produce the same files.
    """
    if n_events < 0 or n_users < 1 or n_files < 1:
        raise ValueError("need n_events >= 0, n_users >= 1 and n_files >= 1")
    rng = random.Random(seed)
    events: List[Tuple[int, str, str, int, str, int]] = []
    while len(events) < n_events:
        user = f"u{int(n_users * rng.random() ** 1.2):05d}"
        t = DAY_START_US + rng.randrange(DAY_US // 1000) * 1000
        for _ in range(rng.randint(1, 40)):
            if len(events) >= n_events or t >= DAY_START_US + DAY_US:
                break
            # mostly a minute or two to the next event; now and then a pause that may end the session
            gap_ms = int(rng.expovariate(1 / 100.0) * 1000) + 1
            if rng.random() < 0.05:
                gap_ms += rng.randint(10, 60) * 60_000
            r = rng.random()
            if r < 0.80:
                watched = min(rng.randint(5, 600), gap_ms // 1000)
                events.append((t, user, "view", watched, "", 0))
            else:
                adv = ADVERTISERS[min(int(len(ADVERTISERS) * rng.random() ** 1.5), len(ADVERTISERS) - 1)]
                if r < 0.97:
                    events.append((t, user, "ad_impression", 0, adv, rng.randint(500, 5_000)))
                else:
                    events.append((t, user, "ad_click", 0, adv, rng.randint(100_000, 2_000_000)))
            t += gap_ms * 1000
    events.sort()
    lines: List[str] = []
    day = _fmt_time(DAY_START_US)[:11]
    for t, user, kind, secs, adv, price in events:
        ms = (t - DAY_START_US) // 1000  # the same text as _fmt_time(t), made faster
        h, ms = divmod(ms, 3_600_000)
        m, ms = divmod(ms, 60_000)
        sec, ms = divmod(ms, 1000)
        head = f'{{"user":"{user}","time":"{day}{h:02d}:{m:02d}:{sec:02d}.{ms:03d}Z","kind":"{kind}"'
        if kind == "view":
            lines.append(f'{head},"secs":{secs}}}')
        else:
            lines.append(f'{head},"advertiser":"{adv}","price":{price / 1_000_000!r}}}')
    for bad in MALFORMED_LINES:
        lines.insert(rng.randrange(len(lines) + 1), bad)
    os.makedirs(input_dir, exist_ok=True)
    for old in glob.glob(os.path.join(input_dir, "events-*.jsonl")):
        os.remove(old)
    paths = []
    per_file = -(-len(lines) // n_files)
    for i in range(n_files):
        path = os.path.join(input_dir, f"events-{i:03d}.jsonl")
        with open(path, "w", encoding="utf-8") as fh:
            for line in lines[i * per_file:(i + 1) * per_file]:
                fh.write(line)
                fh.write("\n")
        paths.append(path)
    return GeneratedInput(paths, len(events), len(MALFORMED_LINES))


# ---------------------------------------------------------------------------------------
# parsing


def parse_event(line: str) -> Event:
    """Parses one JSON log line into an Event; raises ValueError (or KeyError) if it is malformed."""
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    user = rec["user"]
    if not isinstance(user, str) or not user:
        raise ValueError(f"bad user id {user!r}")
    ts_us = window.Timestamp.from_rfc3339(rec["time"]).micros
    kind = rec["kind"]
    if kind == "view":
        secs = rec["secs"]
        if not isinstance(secs, int) or secs < 0:
            raise ValueError(f"bad seconds watched {secs!r}")
        return Event(user, ts_us, kind, secs, "", 0)
    if kind in ("ad_impression", "ad_click"):
        advertiser = rec["advertiser"]
        price = rec["price"]
        if not isinstance(price, (int, float)) or price < 0:
            raise ValueError(f"bad price {price!r}")
        return Event(user, ts_us, kind, 0, str(advertiser), round(price * 1_000_000))
    raise ValueError(f"unknown event kind {kind!r}; expected one of {KINDS}")


class ParseEventFn(beam.DoFn):
    """Parses log lines into Events, counting lines and events by kind."""

    def setup(self) -> None:
        self.lines = beam.Metrics.counter(NAMESPACE, "lines_read")
        self.by_kind = {k: beam.Metrics.counter(NAMESPACE, f"events_{k}") for k in KINDS}

    def process(self, line: str) -> Iterable[Event]:
        self.lines.inc()
        event = parse_event(line)
        self.by_kind[event.kind].inc()
        yield event


def dead_letter_record(bad: Tuple[str, Any]) -> str:
    """Formats a dead-letter element (line, error info) as a JSON line, and counts it."""
    line, error = bad
    beam.Metrics.counter(NAMESPACE, "malformed_lines").inc()
    return json.dumps({"line": line, "error": error[1], "step": getattr(error, "step", None)})


def with_event_time(event: Event) -> Any:
    """Stamps an event with its event time."""
    return window.TimestampedValue(event, window.Timestamp(micros=event.ts_us))


# ---------------------------------------------------------------------------------------
# (a) sessions


def user_activity(event: Event) -> Tuple[str, Tuple[int, int]]:
    """(user, (event time, seconds watched)): what a session summary needs of an event."""
    return event.user, (event.ts_us, event.secs)


class SessionStatsFn(beam.CombineFn):
    """Summarises one session: [events, seconds watched, first event time, last event time]."""

    def create_accumulator(self) -> List[int]:
        return [0, 0, 2**63 - 1, -(2**63)]

    def add_input(self, acc: List[int], activity: Tuple[int, int]) -> List[int]:
        ts, secs = activity
        acc[0] += 1
        acc[1] += secs
        if ts < acc[2]:
            acc[2] = ts
        if ts > acc[3]:
            acc[3] = ts
        return acc

    def merge_accumulators(self, accumulators: Iterable[List[int]]) -> List[int]:
        out = self.create_accumulator()
        for a in accumulators:
            out[0] += a[0]
            out[1] += a[1]
            out[2] = min(out[2], a[2])
            out[3] = max(out[3], a[3])
        return out

    def extract_output(self, acc: List[int]) -> Tuple[int, int, int, int]:
        return tuple(acc)  # type: ignore[return-value]


class SessionRecordFn(beam.DoFn):
    """Turns (user, session summary) in a merged session window into a SessionRecord."""

    def setup(self) -> None:
        self.sessions = beam.Metrics.counter(NAMESPACE, "sessions")

    def process(self, kv: Tuple[str, Tuple[int, int, int, int]],
                win: Any = beam.DoFn.WindowParam) -> Iterable[SessionRecord]:
        user, (events, watch, first, last) = kv
        self.sessions.inc()
        yield SessionRecord(user, win.start.micros, win.end.micros, events, watch, first, last)


def session_json(s: SessionRecord) -> str:
    """A session as a JSON line."""
    return json.dumps({"user": s.user, "start": _fmt_time(s.first_us), "end": _fmt_time(s.last_us),
                       "window": [_fmt_time(s.window_start_us), _fmt_time(s.window_end_us)],
                       "events": s.events, "watch_secs": s.watch_secs,
                       "length_s": s.length_us / 1e6})


class UserTotalsFn(beam.CombineFn):
    """Per user: [sessions, seconds watched, summed session length in microseconds]."""

    def create_accumulator(self) -> List[int]:
        return [0, 0, 0]

    def add_input(self, acc: List[int], s: SessionRecord) -> List[int]:
        acc[0] += 1
        acc[1] += s.watch_secs
        acc[2] += s.length_us
        return acc

    def merge_accumulators(self, accumulators: Iterable[List[int]]) -> List[int]:
        out = [0, 0, 0]
        for a in accumulators:
            out[0] += a[0]
            out[1] += a[1]
            out[2] += a[2]
        return out

    def extract_output(self, acc: List[int]) -> Dict[str, Any]:
        sessions, watch, length = acc
        return {"sessions": sessions, "watch_secs": watch,
                "avg_session_length_s": round(length / sessions / 1e6, 3) if sessions else 0.0}


def user_stats_record(user: str, totals: Dict[str, Any]) -> Dict[str, Any]:
    """A user's totals as one flat record."""
    return {"user": user, **totals}


class SessionSummaryFn(UserTotalsFn):
    """Over all sessions: the same three sums as UserTotalsFn, reported as one summary."""

    def extract_output(self, acc: List[int]) -> Dict[str, Any]:
        n, watch, length = acc
        return {"sessions": n, "watch_secs": watch,
                "mean_length_s": length / n / 1e6 if n else 0.0}


def watch_rank(user: Dict[str, Any]) -> Tuple[int, str]:
    """Ranks users by watch time (ties broken by user id)."""
    return user["watch_secs"], user["user"]


# ---------------------------------------------------------------------------------------
# (b) billing


def is_ad(event: Event) -> bool:
    """True for billable events (ad impressions and clicks)."""
    return event.kind != "view"


def advertiser_price(event: Event) -> Tuple[str, int]:
    """(advertiser, price in micro-dollars)."""
    return event.advertiser, event.price_micros


def to_all_advertisers(kv: Tuple[str, int]) -> Tuple[str, int]:
    """Re-keys an advertiser's revenue to the key 'ALL' to total it over advertisers."""
    return "ALL", kv[1]


class HourRecordFn(beam.DoFn):
    """(key, revenue) in an hourly window -> {'hour', 'advertiser', 'revenue_micros'}."""

    def process(self, kv: Tuple[str, int], win: Any = beam.DoFn.WindowParam) -> Iterable[Dict[str, Any]]:
        key, revenue = kv
        yield {"hour": _fmt_time(win.start.micros), "hour_us": win.start.micros,
               "advertiser": key, "revenue_micros": revenue}


def revenue_of(record: Dict[str, Any]) -> Tuple[int, int]:
    """Ranks hours by revenue (ties: the earlier hour wins)."""
    return record["revenue_micros"], -record["hour_us"]


# ---------------------------------------------------------------------------------------
# the pipeline


OUTPUTS = ("sessions", "user_stats", "session_summary", "revenue_by_advertiser", "revenue_by_hour",
           "busiest_hour", "top_users", "dead_letters")


def build_pipeline(p: beam.Pipeline, input_pattern: str, output_dir: str) -> None:
    """Adds the whole job to `p`: read, parse, sessions, billing, top users, writes."""

    def write(pcoll: Any, name: str, num_shards: int = 1) -> None:
        _ = (pcoll
             | f"Format[{name}]" >> beam.Map(lambda x: x if isinstance(x, str) else json.dumps(x))
             | f"Write[{name}]" >> beam.WriteToText(os.path.join(output_dir, name),
                                                     file_name_suffix=".jsonl",
                                                     num_shards=num_shards))

    lines = p | "ReadEvents" >> beam.ReadFromText(input_pattern)
    events, malformed = lines | "Parse" >> beam.ParDo(ParseEventFn()).with_exception_handling()
    write(malformed | "DeadLetter" >> beam.Map(dead_letter_record), "dead_letters")

    stamped = events | "EventTime" >> beam.Map(with_event_time)

    # (a) sessions per user, then per-user totals
    sessions = (stamped
                | "UserActivity" >> beam.Map(user_activity)
                | "SessionWindows" >> beam.WindowInto(window.Sessions(SESSION_GAP_S))
                | "SummariseSession" >> beam.CombinePerKey(SessionStatsFn())
                | "SessionRecord" >> beam.ParDo(SessionRecordFn()))
    write(sessions | "SessionJson" >> beam.Map(session_json), "sessions", num_shards=2)
    all_sessions = sessions | "SessionsGlobal" >> beam.WindowInto(window.GlobalWindows())
    user_stats = (all_sessions
                  | "KeyByUser" >> beam.Map(lambda s: (s.user, s))
                  | "PerUserTotals" >> beam.CombinePerKey(UserTotalsFn())
                  | "UserRecord" >> beam.MapTuple(user_stats_record))
    write(user_stats, "user_stats", num_shards=2)
    write(all_sessions | "SessionSummary" >> beam.CombineGlobally(SessionSummaryFn()),
          "session_summary")

    # (b) hourly revenue per advertiser and over all advertisers
    revenue = (stamped
               | "AdsOnly" >> beam.Filter(is_ad)
               | "AdvertiserPrice" >> beam.Map(advertiser_price)
               | "HourlyWindows" >> beam.WindowInto(window.FixedWindows(HOUR_S))
               | "RevenuePerAdvertiser" >> beam.CombinePerKey(sum))
    write(revenue | "AdvertiserHour" >> beam.ParDo(HourRecordFn()), "revenue_by_advertiser")
    hourly = (revenue
              | "AllAdvertisers" >> beam.Map(to_all_advertisers)
              | "RevenuePerHour" >> beam.CombinePerKey(sum)
              | "Hour" >> beam.ParDo(HourRecordFn()))
    write(hourly, "revenue_by_hour")
    write(hourly
          | "HoursGlobal" >> beam.WindowInto(window.GlobalWindows())
          | "BusiestHour" >> combiners.Top.Of(1, key=revenue_of),
          "busiest_hour")

    # (c) top 5 users by watch time
    write(user_stats | "Top5Users" >> combiners.Top.Of(5, key=watch_rank), "top_users")


# ---------------------------------------------------------------------------------------
# running and reporting


def read_output(output_dir: str, name: str) -> List[Any]:
    """The JSON records of one output (all its shards)."""
    out: List[Any] = []
    for path in sorted(glob.glob(os.path.join(output_dir, f"{name}-*.jsonl"))):
        with open(path, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out


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
        for path in glob.glob(os.path.join(output_dir, f"{name}-*.jsonl")):
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
    outputs = sorted(f for name in OUTPUTS
                     for f in glob.glob(os.path.join(output_dir, f"{name}-*.jsonl")))
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
        start = _fmt_time(r.busiest_hour_start_us)
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


if __name__ == "__main__":
    sys.exit(main())
