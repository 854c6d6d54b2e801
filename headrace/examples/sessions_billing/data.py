"""The job's input: a generated day of video-site event logs, as JSON-lines files.

Holds the log's constants (the day it covers, event kinds, advertisers, the malformed lines
mixed in on purpose, the generator's defaults), `fmt_time` (an event time as the log writes it)
and `generate_events`, which writes the files. Nothing here depends on a pipeline.
"""

from __future__ import annotations

import datetime as _dt
import glob
import os
import random
import re
import threading
import time
from operator import itemgetter
from typing import Dict, List, NamedTuple, Optional, Tuple

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


class GeneratedInput(NamedTuple):
    """What `generate_events` wrote."""

    paths: List[str]
    events: int
    malformed: int


def fmt_time(ts_us: int) -> str:
    """An event time (microseconds since the epoch) as the log writes it: RFC 3339, UTC, milliseconds."""
    dt = DAY_START + _dt.timedelta(microseconds=ts_us - DAY_START_US)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def generate_lines(n_events: int = DEFAULT_EVENTS, n_users: int = DEFAULT_USERS,
                   seed: int = DEFAULT_SEED) -> List[str]:
    """The log of one day: `n_events` events as JSON lines in time order, with the
    `MALFORMED_LINES` mixed in at random places.

    Users come back in bursts of activity (a few to a few dozen events, minutes apart); some
    users are far more active than others. The same arguments always give the same lines.
    """
    if n_events < 0 or n_users < 1:
        raise ValueError("need n_events >= 0 and n_users >= 1")
    rng = random.Random(seed)
    # the generator's calls bound once (the same calls in the same order as ever: the same lines)
    rand, randint, randrange, expovariate = rng.random, rng.randint, rng.randrange, rng.expovariate
    events: List[Tuple[int, str, str, int, str, int]] = []
    append = events.append
    end_us = DAY_START_US + DAY_US
    n_adv = len(ADVERTISERS)
    while len(events) < n_events:
        user = f"u{int(n_users * rand() ** 1.2):05d}"
        t = DAY_START_US + randrange(DAY_US // 1000) * 1000
        for _ in range(randint(1, 40)):
            if len(events) >= n_events or t >= end_us:
                break
            # mostly a minute or two to the next event; now and then a pause that may end the session
            gap_ms = int(expovariate(1 / 100.0) * 1000) + 1
            if rand() < 0.05:
                gap_ms += randint(10, 60) * 60_000
            r = rand()
            if r < 0.80:
                watched = min(randint(5, 600), gap_ms // 1000)
                append((t, user, "view", watched, "", 0))
            else:
                adv = ADVERTISERS[min(int(n_adv * rand() ** 1.5), n_adv - 1)]
                if r < 0.97:
                    append((t, user, "ad_impression", 0, adv, randint(500, 5_000)))
                else:
                    append((t, user, "ad_click", 0, adv, randint(100_000, 2_000_000)))
            t += gap_ms * 1000
    _sort_events(events)
    lines: List[str] = []
    add = lines.append
    day = fmt_time(DAY_START_US)[:11]
    # the same text as fmt_time(t), made faster: each second's "HH:MM:SS" made once
    clock: Dict[int, str] = {}
    for t, user, kind, secs, adv, price in events:
        second, ms = divmod((t - DAY_START_US) // 1000, 1000)
        hms = clock.get(second)
        if hms is None:
            h, rest = divmod(second, 3600)
            hms = clock[second] = f"{day}{h:02d}:{rest // 60:02d}:{rest % 60:02d}"
        if kind == "view":
            add(f'{{"user":"{user}","time":"{hms}.{ms:03d}Z","kind":"view","secs":{secs}}}')
        else:
            add(f'{{"user":"{user}","time":"{hms}.{ms:03d}Z","kind":"{kind}",'
                f'"advertiser":"{adv}","price":{price / 1_000_000!r}}}')
    for bad in MALFORMED_LINES:
        lines.insert(rng.randrange(len(lines) + 1), bad)
    return lines


def _sort_events(events: List[Tuple[int, str, str, int, str, int]]) -> None:
    """Sorts events as whole tuples, faster: by time first (a key of ints), then each run of
    equal times (a few in a hundred) by the whole tuple, which is the order a sort of the
    tuples gives (they compare by time first)."""
    events.sort(key=itemgetter(0))
    n = len(events)
    i = 0
    while i < n - 1:
        t = events[i][0]
        if events[i + 1][0] != t:
            i += 1
            continue
        j = i + 2
        while j < n and events[j][0] == t:
            j += 1
        events[i:j] = sorted(events[i:j])
        i = j


def generate_events(input_dir: str, n_events: int = DEFAULT_EVENTS, n_users: int = DEFAULT_USERS,
                    seed: int = DEFAULT_SEED, n_files: int = 4) -> GeneratedInput:
    """Writes `n_events` events of one day (plus `MALFORMED_LINES`) to `n_files` JSON-lines files.

    The files split the day's log (`generate_lines`) in time order, like rotated logs. The same
    arguments always produce the same files.
    """
    if n_files < 1:
        raise ValueError("need n_files >= 1")
    lines = generate_lines(n_events, n_users, seed)
    os.makedirs(input_dir, exist_ok=True)
    for old in glob.glob(os.path.join(input_dir, "events-*.jsonl")):
        os.remove(old)
    paths = []
    per_file = -(-len(lines) // n_files)
    for i in range(n_files):
        path = os.path.join(input_dir, f"events-{i:03d}.jsonl")
        part = lines[i * per_file:(i + 1) * per_file]
        with open(path, "w", encoding="utf-8") as fh:
            if part:
                fh.write("\n".join(part))
                fh.write("\n")
        paths.append(path)
    return GeneratedInput(paths, n_events, len(MALFORMED_LINES))


class LogStream(NamedTuple):
    """What `stream_plan` decided: the files' contents in the order they appear, and the lines
    held back to arrive late (within the allowed lateness, and beyond it)."""

    files: List[Tuple[str, List[str]]]
    late: int
    too_late: List[str]   # the lines that arrive after their windows' allowed lateness


def stream_plan(lines: List[str], n_files: int, late_every: int = 97, too_late_every: int = 1009,
                late_by: int = 2, too_late_by: int = 6) -> LogStream:
    """Cuts a day's log (`generate_lines`) into `n_files` files by event time (file k holds the
    k-th of `n_files` equal parts of the day, like hourly rotated logs; a line without a
    readable time stays with the line before it), except that every `late_every`-th line
    arrives `late_by` files later and every `too_late_every`-th line `too_late_by` files later
    (late data: a phone that was offline). Deterministic."""
    if n_files < 1:
        raise ValueError("need n_files >= 1")
    chunks: List[List[str]] = [[] for _ in range(n_files)]
    late = 0
    too_late: List[str] = []
    k = 0
    for i, line in enumerate(lines):
        m = _TIME.search(line)
        if m is not None:
            h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
            if h < 24 and mi < 60 and sec < 60:
                k = min(n_files - 1, (h * 3600 + mi * 60 + sec) * n_files // 86400)
        dest = k
        if i % too_late_every == too_late_every - 1 and k + too_late_by < n_files:
            dest = k + too_late_by
            too_late.append(line)
        elif i % late_every == late_every - 1 and k + late_by < n_files:
            dest = k + late_by
            late += 1
        chunks[dest].append(line)
    return LogStream([(f"events-{j:04d}.jsonl", c) for j, c in enumerate(chunks)], late, too_late)


_TIME = re.compile(r'"time": ?"\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d)')


def write_stream(input_dir: str, plan: LogStream, interval_s: float,
                 stop: Optional[threading.Event] = None) -> None:
    """Writes the planned files into `input_dir` one every `interval_s` seconds (each written
    whole under a temporary name, then renamed, as a log shipper does); returns when all are
    written or `stop` is set."""
    os.makedirs(input_dir, exist_ok=True)
    for name, chunk in plan.files:
        if stop is not None and stop.wait(interval_s):
            return
        if stop is None:
            time.sleep(interval_s)
        tmp = os.path.join(input_dir, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in chunk))
        os.replace(tmp, os.path.join(input_dir, name))
