"""The pipeline: parsing the log, (a) sessions, (b) billing, (c) top users, and the writes.

Holds the records the pipeline passes around (`Event`, `SessionRecord`), `parse_event` and
the DoFns, CombineFns and functions of each step, `build_pipeline`, which adds the whole job to
a `Pipeline`, and the names and files of its outputs (`OUTPUTS`, `output_paths`,
`read_output`). Its metrics counters are in the namespace `NAMESPACE`.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Dict, Iterable, List, NamedTuple, Tuple

import headrace as beam
from headrace import combiners, window
from headrace.transforms import trigger
from headrace.examples.sessions_billing.data import HOUR_S, KINDS, fmt_time

NAMESPACE = "sessions_billing"
SESSION_GAP_S = 30 * 60


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
    return json.dumps({"user": s.user, "start": fmt_time(s.first_us), "end": fmt_time(s.last_us),
                       "window": [fmt_time(s.window_start_us), fmt_time(s.window_end_us)],
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
        yield {"hour": fmt_time(win.start.micros), "hour_us": win.start.micros,
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
    build_from_lines(p | "ReadEvents" >> beam.ReadFromText(input_pattern), output_dir)


def build_from_lines(lines: Any, output_dir: str) -> None:
    """The job after its read: parse the log lines `lines`, sessions, billing, top users, writes
    (the same job whether `lines` is a bounded read or a stream)."""

    def write(pcoll: Any, name: str, num_shards: int = 1) -> None:
        _write(pcoll, output_dir, name, num_shards)

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
# the streaming variant: the same sessions and billing, with early and late panes


STREAM_OUTPUTS = ("session_panes", "revenue_panes", "dead_letters")


class PaneRecordFn(beam.DoFn):
    """(key, result) in a window -> a record of the pane (its timing and index), counted by
    timing in the counters `<name>_panes_<timing>`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def setup(self) -> None:
        self.counters = {t: beam.Metrics.counter(NAMESPACE, f"{self.name}_panes_{t.lower()}")
                         for t in ("EARLY", "ON_TIME", "LATE")}

    def process(self, kv: Tuple[str, Any], win: Any = beam.DoFn.WindowParam,
                pane: Any = beam.DoFn.PaneInfoParam) -> Iterable[Dict[str, Any]]:
        key, value = kv
        timing = pane.timing.name
        if timing in self.counters:
            self.counters[timing].inc()
        yield {"key": key, "window": [fmt_time(win.start.micros), fmt_time(win.end.micros)],
               "window_us": win.start.micros, "timing": timing, "index": pane.index,
               "last": pane.is_last, "value": list(value) if isinstance(value, tuple) else value}


def build_streaming(lines: Any, output_dir: str, early_s: float, lateness_s: int,
                    tables: Any = None) -> None:
    """The job on a stream of log lines: sessions per user and hourly revenue per advertiser,
    each window firing early every `early_s` seconds of processing time, on time when the
    watermark passes its end, and again for every late event within `lateness_s` seconds of
    allowed lateness (accumulating: each pane holds the whole result so far). The panes go to
    files in `output_dir`, or with `tables` (a `queues.ResultTables`) to its PostgreSQL tables;
    the dead letters always to a file."""
    events, malformed = lines | "Parse" >> beam.ParDo(ParseEventFn()).with_exception_handling()
    _write(malformed
           | "DeadLetter" >> beam.Map(dead_letter_record)
           | "DeadLetterPanes" >> beam.WindowInto(  # never late: a file each second they come
               window.GlobalWindows(),
               trigger=trigger.Repeatedly(trigger.AfterProcessingTime(1)),
               accumulation_mode=trigger.AccumulationMode.DISCARDING),
           output_dir, "dead_letters")
    stamped = events | "EventTime" >> beam.Map(with_event_time)

    def panes(windowfn: Any) -> Any:
        return beam.WindowInto(windowfn,
                               trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(early_s),
                                                              late=trigger.AfterCount(1)),
                               accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                               allowed_lateness=lateness_s)

    sessions = (stamped
                | "UserActivity" >> beam.Map(user_activity)
                | "SessionWindows" >> panes(window.Sessions(SESSION_GAP_S))
                | "SummariseSession" >> beam.CombinePerKey(SessionStatsFn())
                | "SessionPane" >> beam.ParDo(PaneRecordFn("session")))
    if tables is None:
        _write(sessions, output_dir, "session_panes")
    else:
        tables.write_sessions(sessions)
    revenue = (stamped
               | "AdsOnly" >> beam.Filter(is_ad)
               | "AdvertiserPrice" >> beam.Map(advertiser_price)
               | "HourlyWindows" >> panes(window.FixedWindows(HOUR_S))
               | "RevenuePerAdvertiser" >> beam.CombinePerKey(sum)
               | "RevenuePane" >> beam.ParDo(PaneRecordFn("revenue")))
    if tables is None:
        _write(revenue, output_dir, "revenue_panes")
    else:
        tables.write_revenue(revenue)


def _write(pcoll: Any, output_dir: str, name: str, num_shards: int = 1) -> None:
    """Writes records (JSON) or strings as the JSON-lines output `name` (shards of each window
    and pane on a stream)."""
    _ = (pcoll
         | f"Format[{name}]" >> beam.Map(lambda x: x if isinstance(x, str) else json.dumps(x))
         | f"Write[{name}]" >> beam.WriteToText(os.path.join(output_dir, name),
                                                 file_name_suffix=".jsonl", num_shards=num_shards))


# ---------------------------------------------------------------------------------------
# reading the outputs back


def output_paths(output_dir: str, name: str) -> List[str]:
    """The files (shards) of one output in `output_dir`, sorted."""
    return sorted(glob.glob(os.path.join(output_dir, f"{name}-*.jsonl")))


def read_output(output_dir: str, name: str) -> List[Any]:
    """The JSON records of one output (all its shards)."""
    out: List[Any] = []
    for path in output_paths(output_dir, name):
        with open(path, encoding="utf-8") as fh:
            out.extend(json.loads(line) for line in fh if line.strip())
    return out
