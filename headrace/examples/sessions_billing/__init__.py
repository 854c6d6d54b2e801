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

The modules, one idea each:

* `data`: the input, a generated day of event logs (`generate_events`) and the log's constants;
* `pipeline`: the pipeline, its records, parsing, DoFns and CombineFns, `build_pipeline`, and
  reading its outputs back (`read_output`);
* `cli`: the command line, flags (`parse_args`), `run`, the printed report and `main`
  (`__main__` calls it).
* `queues`: `--streaming --source redis|kafka`, the log fed burst by burst through a Redis
  stream or a Kafka topic, and the panes written to PostgreSQL (`ResultTables`).

This package re-exports the names other code uses.
"""

from headrace.examples.sessions_billing.cli import JobResult, format_summary, main, parse_args, run
from headrace.examples.sessions_billing.data import (ADVERTISERS, DAY_START, DAY_START_US, DAY_US,
                                                     DEFAULT_EVENTS, DEFAULT_SEED, DEFAULT_USERS, HOUR_S,
                                                     KINDS, MALFORMED_LINES, GeneratedInput, fmt_time,
                                                     generate_events)
from headrace.examples.sessions_billing.pipeline import (NAMESPACE, OUTPUTS, SESSION_GAP_S, Event,
                                                         SessionRecord, build_from_lines, build_pipeline,
                                                         output_paths,
                                                         parse_event, read_output)

__all__ = [
    # data
    "ADVERTISERS", "DAY_START", "DAY_START_US", "DAY_US", "DEFAULT_EVENTS", "DEFAULT_SEED",
    "DEFAULT_USERS", "HOUR_S", "KINDS", "MALFORMED_LINES", "GeneratedInput", "fmt_time",
    "generate_events",
    # pipeline
    "NAMESPACE", "OUTPUTS", "SESSION_GAP_S", "Event", "SessionRecord", "build_from_lines",
    "build_pipeline",
    "output_paths", "parse_event", "read_output",
    # cli
    "JobResult", "format_summary", "main", "parse_args", "run",
]
