"""The job of general_path.py, written once: plain Python functions shared by every contender.

Shaped like the sessions & billing demo (headrace/examples/sessions_billing): JSON log lines are
parsed, malformed ones go to a dead letter; per user, Sessions(30 min) summarised by a custom
CombineFn; per-user totals with a GroupByKey in the global window; the top 5 users by watch
time; hourly revenue per advertiser (FixedWindows(1 h) + sum), then over all advertisers. Every
result is written as JSON lines.

The same functions are used

  * by `build_pipeline(beam, p, ...)`, the Beam-model pipeline, where `beam` is the `headrace`
    module or the `apache_beam` module (the SDK-specific parts, a CombineFn and DoFn subclass, are
    thin classes that call the functions below);
  * by `rdd_job(sc, ...)`, the hand-written PySpark RDD job (textFile, mapPartitions, groupByKey +
    sort for sessions, reduceByKey, top, saveAsTextFile).

Only the standard library is imported at module level: this module runs under Apache Beam's
virtualenv too, and in PySpark's Python workers.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from operator import add
from typing import Any, Dict, Iterable, Iterator, List, NamedTuple, Tuple

SESSION_GAP_S = 30 * 60
SESSION_GAP_US = SESSION_GAP_S * 1_000_000
HOUR_S = 3600
HOUR_US = HOUR_S * 1_000_000
TOP_USERS = 5
KINDS = ("view", "ad_impression", "ad_click")
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
ONE_US = _dt.timedelta(microseconds=1)

# every output: name -> number of shards WriteToText writes (the RDD job: partitions of its RDD)
OUTPUTS = {"dead_letters": 1, "sessions": 2, "user_stats": 2, "top_users": 1,
           "revenue_by_advertiser": 1, "revenue_by_hour": 1}


class Event(NamedTuple):
    """One parsed log line. `price_micros` is in millionths of a dollar (0 for views)."""

    user: str
    ts_us: int
    kind: str
    secs: int
    advertiser: str
    price_micros: int


class SessionRecord(NamedTuple):
    """One session of one user: its merged window [first, last + gap), events, watch time."""

    user: str
    window_start_us: int
    window_end_us: int
    events: int
    watch_secs: int
    first_us: int
    last_us: int


# ---- parsing --------------------------------------------------------------------------------------

def parse_time_us(text: str) -> int:
    """An RFC 3339 time with a zone ('2024-05-01T10:00:00.000Z') as microseconds since the epoch."""
    dt = _dt.datetime.fromisoformat(text)
    if dt.tzinfo is None:
        raise ValueError(f"time without a zone: {text!r}")
    return (dt - EPOCH) // ONE_US


def fmt_time(ts_us: int) -> str:
    """Microseconds since the epoch as RFC 3339, UTC, milliseconds (as the log writes times)."""
    dt = EPOCH + _dt.timedelta(microseconds=ts_us)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_event(line: str) -> Event:
    """Parses one JSON log line; raises ValueError (or KeyError, TypeError) if it is malformed."""
    rec = json.loads(line)
    if not isinstance(rec, dict):
        raise ValueError(f"expected a JSON object, got {type(rec).__name__}")
    user = rec["user"]
    if not isinstance(user, str) or not user:
        raise ValueError(f"bad user id {user!r}")
    ts_us = parse_time_us(rec["time"])
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


def dead_letter_json(line: str, error_repr: str) -> str:
    """A malformed line and the repr of its exception, as a JSON line."""
    return json.dumps({"line": line, "error": error_repr})


# ---- sessions -------------------------------------------------------------------------------------

def user_activity(event: Event) -> Tuple[str, Tuple[int, int]]:
    """(user, (event time, seconds watched)): what a session summary needs of an event."""
    return event.user, (event.ts_us, event.secs)


def session_create() -> List[int]:
    """A session summary's accumulator: [events, seconds watched, first time, last time]."""
    return [0, 0, 2**63 - 1, -(2**63)]


def session_add(acc: List[int], activity: Tuple[int, int]) -> List[int]:
    ts, secs = activity
    acc[0] += 1
    acc[1] += secs
    if ts < acc[2]:
        acc[2] = ts
    if ts > acc[3]:
        acc[3] = ts
    return acc


def session_merge(accumulators: Iterable[List[int]]) -> List[int]:
    out = session_create()
    for a in accumulators:
        out[0] += a[0]
        out[1] += a[1]
        out[2] = min(out[2], a[2])
        out[3] = max(out[3], a[3])
    return out


def session_output(acc: List[int]) -> Tuple[int, int, int, int]:
    return acc[0], acc[1], acc[2], acc[3]


def session_record(user: str, window_start_us: int, window_end_us: int,
                   stats: Tuple[int, int, int, int]) -> SessionRecord:
    events, watch, first, last = stats
    return SessionRecord(user, window_start_us, window_end_us, events, watch, first, last)


def session_json(s: SessionRecord) -> str:
    """A session as a JSON line."""
    return json.dumps({"user": s.user, "start": fmt_time(s.first_us), "end": fmt_time(s.last_us),
                       "window": [fmt_time(s.window_start_us), fmt_time(s.window_end_us)],
                       "events": s.events, "watch_secs": s.watch_secs,
                       "length_s": (s.last_us - s.first_us) / 1e6})


def user_totals(user: str, sessions: Iterable[SessionRecord]) -> Dict[str, Any]:
    """A user's totals over all their sessions (the values of a GroupByKey)."""
    n = watch = length = 0
    for s in sessions:
        n += 1
        watch += s.watch_secs
        length += s.last_us - s.first_us
    return {"user": user, "sessions": n, "watch_secs": watch,
            "avg_session_length_s": round(length / n / 1e6, 3) if n else 0.0}


def watch_rank(user: Dict[str, Any]) -> Tuple[int, str]:
    """Ranks users by watch time (ties broken by user id)."""
    return user["watch_secs"], user["user"]


# ---- billing --------------------------------------------------------------------------------------

def is_ad(event: Event) -> bool:
    return event.kind != "view"


def advertiser_price(event: Event) -> Tuple[str, int]:
    return event.advertiser, event.price_micros


def to_all_advertisers(kv: Tuple[str, int]) -> Tuple[str, int]:
    return "ALL", kv[1]


def hour_json(key: str, hour_start_us: int, revenue: int) -> str:
    return json.dumps({"hour": fmt_time(hour_start_us), "advertiser": key, "revenue_micros": revenue})


def to_json(x: Any) -> str:
    return json.dumps(x)


# ---- the Beam-model pipeline (headrace or Apache Beam) --------------------------------------------

def build_pipeline(beam: Any, p: Any, input_pattern: str, output_dir: str) -> None:
    """Adds the job to the Pipeline `p` of the SDK `beam` (the headrace or apache_beam module)."""
    window = beam.window
    Timestamp = window.Timestamp

    class SessionStatsFn(beam.CombineFn):
        def create_accumulator(self):
            return session_create()

        def add_input(self, acc, activity):
            return session_add(acc, activity)

        def merge_accumulators(self, accumulators):
            return session_merge(accumulators)

        def extract_output(self, acc):
            return session_output(acc)

    class SessionRecordFn(beam.DoFn):
        def process(self, kv, win=beam.DoFn.WindowParam):
            yield session_record(kv[0], win.start.micros, win.end.micros, kv[1])

    class HourJsonFn(beam.DoFn):
        def process(self, kv, win=beam.DoFn.WindowParam):
            yield hour_json(kv[0], win.start.micros, kv[1])

    def write(pcoll: Any, name: str) -> None:
        _ = pcoll | f"Write[{name}]" >> beam.io.WriteToText(
            os.path.join(output_dir, name), file_name_suffix=".jsonl", num_shards=OUTPUTS[name])

    lines = p | "Read" >> beam.io.ReadFromText(input_pattern)
    events, bad = lines | "Parse" >> beam.Map(parse_event).with_exception_handling()
    write(bad | "DeadLetter" >> beam.Map(lambda b: dead_letter_json(b[0], b[1][1])), "dead_letters")
    stamped = events | "EventTime" >> beam.Map(
        lambda e: window.TimestampedValue(e, Timestamp(micros=e.ts_us)))

    sessions = (stamped
                | "UserActivity" >> beam.Map(user_activity)
                | "SessionWindows" >> beam.WindowInto(window.Sessions(SESSION_GAP_S))
                | "SummariseSession" >> beam.CombinePerKey(SessionStatsFn())
                | "SessionRecord" >> beam.ParDo(SessionRecordFn()))
    write(sessions | "SessionJson" >> beam.Map(session_json), "sessions")
    user_stats = (sessions
                  | "SessionsGlobal" >> beam.WindowInto(window.GlobalWindows())
                  | "KeyByUser" >> beam.Map(lambda s: (s.user, s))
                  | "GroupByUser" >> beam.GroupByKey()
                  | "UserTotals" >> beam.MapTuple(user_totals))
    write(user_stats | "UserJson" >> beam.Map(to_json), "user_stats")
    write(user_stats
          | "Top5Users" >> beam.combiners.Top.Of(TOP_USERS, key=watch_rank)
          | "TopJson" >> beam.Map(to_json), "top_users")

    revenue = (stamped
               | "AdsOnly" >> beam.Filter(is_ad)
               | "AdvertiserPrice" >> beam.Map(advertiser_price)
               | "HourlyWindows" >> beam.WindowInto(window.FixedWindows(HOUR_S))
               | "RevenuePerAdvertiser" >> beam.CombinePerKey(sum))
    write(revenue | "AdvertiserHour" >> beam.ParDo(HourJsonFn()), "revenue_by_advertiser")
    write(revenue
          | "AllAdvertisers" >> beam.Map(to_all_advertisers)
          | "RevenuePerHour" >> beam.CombinePerKey(sum)
          | "Hour" >> beam.ParDo(HourJsonFn()), "revenue_by_hour")


# ---- the hand-written PySpark RDD job -------------------------------------------------------------

def parse_partition(lines: Iterable[str]) -> Iterator[Tuple[bool, Any]]:
    """(True, Event) per good line, (False, dead-letter JSON) per malformed one."""
    for line in lines:
        try:
            yield True, parse_event(line)
        except Exception as e:  # the dead letter, as with_exception_handling catches Exception
            yield False, dead_letter_json(line, repr(e))


def sessions_of_user(kv: Tuple[str, Iterable[Tuple[int, int]]]) -> Iterator[SessionRecord]:
    """A user's activities sorted by time, split where the gap is >= SESSION_GAP_US (Beam's
    Sessions: windows [t, t + gap) merge only when they overlap), each summarised."""
    user, activities = kv
    acc = None
    last = 0
    for activity in sorted(activities):
        ts = activity[0]
        if acc is not None and ts - last >= SESSION_GAP_US:
            stats = session_output(acc)
            yield session_record(user, stats[2], stats[3] + SESSION_GAP_US, stats)
            acc = None
        if acc is None:
            acc = session_create()
        acc = session_add(acc, activity)
        last = ts
    if acc is not None:
        stats = session_output(acc)
        yield session_record(user, stats[2], stats[3] + SESSION_GAP_US, stats)


def sessions_of_sorted(records: Iterator[Tuple[Tuple[str, int], int]]) -> Iterator[SessionRecord]:
    """A partition's ((user, event time), seconds watched) records, sorted by user and time (the
    shuffle sorted them), as the sessions of each user: `sessions_of_user` without a list per
    user."""
    user = None
    acc = None
    last = 0
    for (u, ts), secs in records:
        if acc is not None and (u != user or ts - last >= SESSION_GAP_US):
            stats = session_output(acc)
            yield session_record(user, stats[2], stats[3] + SESSION_GAP_US, stats)  # type: ignore[arg-type]
            acc = None
        if acc is None:
            acc = session_create()
            user = u
        acc = session_add(acc, (ts, secs))
        last = ts
    if acc is not None:
        stats = session_output(acc)
        yield session_record(user, stats[2], stats[3] + SESSION_GAP_US, stats)  # type: ignore[arg-type]


def _add3(a: Tuple[int, int, int], b: Tuple[int, int, int]) -> Tuple[int, int, int]:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2]


def totals_of(user: str, t: Tuple[int, int, int]) -> Dict[str, Any]:
    """`user_totals` from (sessions, seconds watched, summed session length)."""
    n, watch, length = t
    return {"user": user, "sessions": n, "watch_secs": watch,
            "avg_session_length_s": round(length / n / 1e6, 3) if n else 0.0}


def rdd_job(sc: Any, input_pattern: str, output_dir: str, partitions: int) -> None:
    """The same job by hand on PySpark RDDs, as lean as a PySpark user who knows Spark would write
    it: the lines parsed once and cached (several outputs read them); sessions by a shuffle that
    sorts each user's events by time (`repartitionAndSortWithinPartitions`), cut in one pass
    without a list per user; the per-user totals and the revenue sums combined before their
    shuffles (`reduceByKey`); one action per output."""
    from pyspark.rdd import portable_hash

    def save(rdd: Any, name: str, shuffle: bool = False) -> None:
        rdd.coalesce(OUTPUTS[name], shuffle=shuffle).saveAsTextFile(os.path.join(output_dir, name))

    parsed = sc.textFile(input_pattern).mapPartitions(parse_partition).cache()
    # shuffle=True: a narrow coalesce(1) would run its whole upstream, the parse of every line, as
    # one task on one core (Spark pulls a coalesce up through narrow dependencies)
    save(parsed.filter(lambda t: not t[0]).map(lambda t: t[1]), "dead_letters", shuffle=True)
    events = parsed.filter(lambda t: t[0]).map(lambda t: t[1])

    sessions = (events.map(lambda e: ((e.user, e.ts_us), e.secs))
                .repartitionAndSortWithinPartitions(partitions, lambda k: portable_hash(k[0]))
                .mapPartitions(sessions_of_sorted).cache())
    save(sessions.map(session_json), "sessions")
    user_stats = (sessions.map(lambda s: (s.user, (1, s.watch_secs, s.last_us - s.first_us)))
                  .reduceByKey(_add3, partitions)
                  .map(lambda kv: totals_of(kv[0], kv[1])).cache())
    save(user_stats.map(to_json), "user_stats")
    top = user_stats.top(TOP_USERS, key=watch_rank)
    save(sc.parallelize([to_json(top)], 1), "top_users")

    revenue = (events.filter(is_ad)
               .map(lambda e: ((e.advertiser, e.ts_us - e.ts_us % HOUR_US), e.price_micros))
               .reduceByKey(add, partitions).cache())
    save(revenue.map(lambda kv: hour_json(kv[0][0], kv[0][1], kv[1])), "revenue_by_advertiser")
    save(revenue.map(lambda kv: (kv[0][1], kv[1])).reduceByKey(add, partitions)
         .map(lambda kv: hour_json("ALL", kv[0], kv[1])), "revenue_by_hour")
    for rdd in (parsed, sessions, user_stats, revenue):
        rdd.unpersist()


# ---- reading the outputs back ---------------------------------------------------------------------

def output_lines(output_dir: str, name: str) -> List[str]:
    """The lines of one output, whichever way it was written: WriteToText's name-*.jsonl shards
    or saveAsTextFile's directory name/part-*."""
    import glob

    d = os.path.join(output_dir, name)
    paths = (sorted(glob.glob(os.path.join(d, "part-*"))) if os.path.isdir(d)
             else sorted(glob.glob(os.path.join(output_dir, f"{name}-*.jsonl"))))
    out: List[str] = []
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            out.extend(line.rstrip("\n") for line in fh if line.strip())
    return out


def normalised(output_dir: str) -> Dict[str, List[str]]:
    """Every output as a sorted list of its records, each re-serialised with sorted keys."""
    return {name: sorted(json.dumps(json.loads(line), sort_keys=True)
                         for line in output_lines(output_dir, name))
            for name in OUTPUTS}
