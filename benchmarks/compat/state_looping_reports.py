"""A looping event-time timer on a `TestStream`, and its outputs grouped downstream: a stateful
DoFn reports each sensor's running average every 20 s of event time from its first reading in
a minute (the last report at the minute's end), and a `GroupByKey` downstream, in the same
fixed windows with no allowed lateness, collects the reports of each sensor and minute.

The downstream grouping takes the reports before the minute's end only. The report at the end
is emitted after the watermark passed the minute (its timer fires then), and reaches the
downstream window on time only if the pending timer held the stateful step's output watermark,
as in Beam Java and headrace; Beam Python's DirectRunner does not hold it (its ParDo evaluator
reports no watermark holds), so there that report arrives late and is dropped."""

from _sdk import (
    BagStateSpec, ReadModifyWriteStateSpec, TestStream, TimeDomain, TimerSpec, beam, on_timer,
    window,
)

STREAMING = True


class RunningAverage(beam.DoFn):
    """Buffers a sensor's readings per minute; a looping timer reports their average."""

    READINGS = BagStateSpec("readings", beam.coders.VarIntCoder())
    ARMED = ReadModifyWriteStateSpec("armed", beam.coders.BooleanCoder())
    REPORT = TimerSpec("report", TimeDomain.WATERMARK)

    def process(self, kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                readings=beam.DoFn.StateParam(READINGS), armed=beam.DoFn.StateParam(ARMED),
                report=beam.DoFn.TimerParam(REPORT)):
        readings.add(kv[1])
        if not armed.read():
            armed.write(True)
            report.set(min(ts + 20, w.max_timestamp()))

    @on_timer(REPORT)
    def on_report(self, key=beam.DoFn.KeyParam, ts=beam.DoFn.TimestampParam,
                  w=beam.DoFn.WindowParam, readings=beam.DoFn.StateParam(READINGS),
                  report=beam.DoFn.TimerParam(REPORT)):
        values = list(readings.read())
        last = ts >= w.max_timestamp()
        yield key, (f"{sum(values) / len(values):.2f} over {len(values)} at {ts.micros // 1000}", last)
        if ts < w.max_timestamp():
            report.set(min(ts + 20, w.max_timestamp()))


def _stream():
    """Readings of 4 sensors every 3 s for 6 minutes, the watermark 10 s behind the latest."""
    stream = TestStream().advance_watermark_to(0)
    for step in range(120):
        t = step * 3
        stream = stream.add_elements(
            [window.TimestampedValue((f"sensor{s}", (step * (s + 3)) % 50), t) for s in range(4)
             if not (s == 3 and 100 <= t < 200)])  # sensor3 is silent for a while
        if step % 5 == 4:
            stream = stream.advance_watermark_to(t - 10)
    return stream.advance_watermark_to_infinity()


def _count_line(kv, w=beam.DoFn.WindowParam):
    """The number of reports of a sensor in a minute, and the reports."""
    key, reports = kv
    reports = sorted(reports, key=lambda r: int(r.rsplit(" ", 1)[1]))
    return f"window {key} [{w.start.micros // 1000000}s]: {len(reports)} reports {reports}"


def build(p, inputs):
    """The reports, and those before the minute's end per sensor and minute from a downstream
    GroupByKey."""
    reports = (p
               | _stream()
               | beam.WindowInto(window.FixedWindows(60))
               | beam.ParDo(RunningAverage()))
    lines = reports | "ReportLines" >> beam.MapTuple(lambda k, r: f"report {k}: {r[0]}")
    counts = (reports
              | "BeforeTheEnd" >> beam.Filter(lambda kv: not kv[1][1])
              | "Report" >> beam.MapTuple(lambda k, r: (k, r[0]))
              | beam.GroupByKey()
              | beam.Map(_count_line))
    return ((lines | "LinesGlobal" >> beam.WindowInto(window.GlobalWindows()),
             counts | "CountsGlobal" >> beam.WindowInto(window.GlobalWindows()))
            | beam.Flatten())
