"""`SetStateSpec` and `OrderedListStateSpec`: the distinct pages each user visited in a window
(a set), and each sensor's readings kept in timestamp order (an ordered list), read whole and
by ranges (`read_range`) and partly cleared (`clear_range`) by a watermark timer."""

from _sdk import (
    OrderedListStateSpec, SetStateSpec, TimeDomain, Timestamp, TimerSpec, beam, on_timer, window,
)


class DistinctPages(beam.DoFn):
    """Collects a user's distinct pages per window; emits them, sorted, at the window's end."""

    PAGES = SetStateSpec("pages", beam.coders.StrUtf8Coder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, pages=beam.DoFn.StateParam(PAGES),
                flush=beam.DoFn.TimerParam(FLUSH)):
        pages.add(kv[1])
        flush.set(w.max_timestamp())

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                 pages=beam.DoFn.StateParam(PAGES)):
        distinct = sorted(pages.read())
        pages.clear()
        yield f"pages {key} [{w.start.micros // 1000000}s]: {len(distinct)} {distinct}"
        yield f"pages {key} [{w.start.micros // 1000000}s] after clear: {sorted(pages.read())}"


class ReadingsInOrder(beam.DoFn):
    """Keeps a sensor's readings by event time; at the window's end reports them in order,
    the first and second half of the window by ranges, and what is left after clearing the
    first half."""

    READINGS = OrderedListStateSpec("readings", beam.coders.VarIntCoder())
    REPORT = TimerSpec("report", TimeDomain.WATERMARK)

    def process(self, kv, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam,
                readings=beam.DoFn.StateParam(READINGS), report=beam.DoFn.TimerParam(REPORT)):
        readings.add((ts, kv[1]))
        report.set(w.max_timestamp())

    @on_timer(REPORT)
    def on_report(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                  readings=beam.DoFn.StateParam(READINGS)):
        start = w.start.micros // 1000000
        middle = Timestamp(start + 150)

        def show(pairs):
            return [(t.micros // 1000000, v) for t, v in pairs]

        everything = show(readings.read())
        yield f"readings {key} [{start}s] all: {everything}"
        yield f"readings {key} [{start}s] first half: {show(readings.read_range(w.start, middle))}"
        yield f"readings {key} [{start}s] second half: {show(readings.read_range(middle, w.end))}"
        readings.clear_range(w.start, middle)
        yield f"readings {key} [{start}s] after clear_range: {show(readings.read())}"
        readings.clear()
        yield f"readings {key} [{start}s] after clear: {show(readings.read())}"


def build(p, inputs):
    """1200 page views of 11 users and 900 readings of 5 sensors, in windows of 5 minutes."""
    views = (p
             | "Views" >> beam.Create([(f"user{i % 11}", f"/page/{(i * i) % 17}", i) for i in range(1200)])
             | "ViewTimes" >> beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
             | "ViewWindows" >> beam.WindowInto(window.FixedWindows(300))
             | beam.ParDo(DistinctPages()))
    # each sensor reads every 5 s; the readings of one second are distinct values
    readings = (p
                | "Readings" >> beam.Create([(f"sensor{i % 5}", (i * 31) % 97, (i // 5) * 5 + i % 5)
                                             for i in range(900)])
                | "ReadingTimes" >> beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
                | "ReadingWindows" >> beam.WindowInto(window.FixedWindows(300))
                | beam.ParDo(ReadingsInOrder()))
    return (views, readings) | beam.Flatten()
