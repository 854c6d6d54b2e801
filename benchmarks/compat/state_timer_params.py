"""Timer callbacks with `DoFn.TimestampParam`, `DoFn.WindowParam` and `DoFn.KeyParam`, emitting
to a main and a tagged output (`beam.pvalue.TaggedOutput`), in sliding windows, and in fixed
windows with allowed lateness (a timer past the window's end, within the lateness); the
timestamps of the timers' outputs are printed downstream."""

from _sdk import (
    CombiningValueStateSpec, ReadModifyWriteStateSpec, TimeDomain, Timestamp, TimerSpec, beam,
    on_timer, window,
)


class WindowSummary(beam.DoFn):
    """Counts a key's events per window; at the window's end emits the count (quiet windows to
    the 'quiet' output), and 10 s after the key's first event in the window a 'started' line."""

    COUNT = CombiningValueStateSpec("count", sum)
    FIRST = ReadModifyWriteStateSpec("first", beam.coders.VarIntCoder())
    END = TimerSpec("end", TimeDomain.WATERMARK)
    STARTED = TimerSpec("started", TimeDomain.WATERMARK)

    def __init__(self, name):
        self.name = name

    def process(self, kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                count=beam.DoFn.StateParam(COUNT), first=beam.DoFn.StateParam(FIRST),
                end=beam.DoFn.TimerParam(END), started=beam.DoFn.TimerParam(STARTED)):
        count.add(1)
        end.set(w.max_timestamp())
        if first.read() is None or ts.micros < first.read():  # the earliest event so far
            first.write(ts.micros)
            started.set(min(Timestamp(micros=ts.micros) + 10, w.max_timestamp()))

    @on_timer(END)
    def on_end(self, key=beam.DoFn.KeyParam, ts=beam.DoFn.TimestampParam,
               w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT)):
        line = (f"{self.name} {key} [{w.start.micros // 1000}, {w.end.micros // 1000}) "
                f"end at {ts.micros // 1000}: {count.read()} events")
        if count.read() < 5:
            yield beam.pvalue.TaggedOutput("quiet", line)
        else:
            yield line

    @on_timer(STARTED)
    def on_started(self, key=beam.DoFn.KeyParam, ts=beam.DoFn.TimestampParam,
                   w=beam.DoFn.WindowParam, first=beam.DoFn.StateParam(FIRST)):
        yield (f"{self.name} {key} [{w.start.micros // 1000}, {w.end.micros // 1000}) started "
               f"at {first.read() // 1000}, reported at {ts.micros // 1000}")


class LateCleanup(beam.DoFn):
    """With allowed lateness: a timer in the lateness period after the window's end."""

    COUNT = CombiningValueStateSpec("count", sum)
    CLEANUP = TimerSpec("cleanup", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT),
                cleanup=beam.DoFn.TimerParam(CLEANUP)):
        count.add(1)
        cleanup.set(w.max_timestamp() + 20)

    @on_timer(CLEANUP)
    def on_cleanup(self, key=beam.DoFn.KeyParam, ts=beam.DoFn.TimestampParam,
                   w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT)):
        yield beam.pvalue.TaggedOutput(
            "cleanup", f"lateness {key} [{w.start.micros // 1000}, {w.end.micros // 1000}) "
                       f"cleanup at {ts.micros // 1000}: {count.read()} events")
        count.clear()


def _with_output_time(line, prefix, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam):
    """The line with its output timestamp (ms) and window start (s)."""
    return f"{prefix}{line} (output time {ts.micros // 1000} in window {w.start.micros // 1000000})"


def build(p, inputs):
    """900 events of 8 keys over 10 minutes, in sliding windows of 2 minutes every minute and
    in fixed windows of 3 minutes with 1 minute of allowed lateness."""
    events = (p
              | beam.Create([(f"key{i % 8}", i, (i * i) % 600 + (i % 3) * 0.25) for i in range(900)
                             if not (i % 8 == 7 and i % 600 > 120)])
              | beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2])))
    # one ParDo per DoFn class: Beam 2.77's DirectRunner delivers the timers of two ParDos of
    # the same stateful DoFn class to one of the two DoFn instances (with its state)
    sliding = (events
               | "Sliding" >> beam.WindowInto(window.SlidingWindows(120, 60))
               | "SlidingSummary" >> beam.ParDo(WindowSummary("sliding")).with_outputs("quiet", main="main"))
    late = (events
            | "FixedLate" >> beam.WindowInto(window.FixedWindows(180), allowed_lateness=60)
            | "Cleanup" >> beam.ParDo(LateCleanup()).with_outputs("cleanup"))
    lines = []
    for name, pcoll, prefix in (("SlidingMain", sliding.main, ""), ("SlidingQuiet", sliding.quiet, "QUIET "),
                                ("Cleanup", late.cleanup, "")):
        lines.append(pcoll
                     | f"{name}Time" >> beam.Map(_with_output_time, prefix)
                     | f"{name}Global" >> beam.WindowInto(window.GlobalWindows()))
    return lines | "Lines" >> beam.Flatten()
