"""Beam's buffered flush: a bag of each key's values in a fixed window, flushed by a watermark
timer at the window's end (the classic BagStateSpec + TimerSpec example)."""

from _sdk import BagStateSpec, TimeDomain, TimerSpec, beam, on_timer, window


class BufferUntilWindowEnd(beam.DoFn):
    """Buffers a key's values and emits them, sorted, when the watermark passes the window."""

    BUFFER = BagStateSpec("buffer", beam.coders.VarIntCoder())
    FLUSH = TimerSpec("flush", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, buffer=beam.DoFn.StateParam(BUFFER),
                flush=beam.DoFn.TimerParam(FLUSH)):
        buffer.add(kv[1])
        flush.set(w.max_timestamp())  # Beam Java refuses w.end (past the window's expiry); so does headrace

    @on_timer(FLUSH)
    def on_flush(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                 ts=beam.DoFn.TimestampParam, buffer=beam.DoFn.StateParam(BUFFER)):
        values = sorted(buffer.read())
        buffer.clear()
        # in milliseconds: Beam Python's timer coder truncates a firing time to milliseconds,
        # headrace keeps the microseconds (docs/beam-compatibility.md)
        yield f"{key} [{w.start.micros // 1000}, {w.end.micros // 1000}) at {ts.micros // 1000}: {values}"


def build(p, inputs):
    """Keys k0..k6 with values 0..299, one per second, in windows of a minute."""
    return (p
            | beam.Create([(f"k{i % 7}", i) for i in range(300)])
            | beam.Map(lambda kv: window.TimestampedValue(kv, kv[1]))
            | beam.WindowInto(window.FixedWindows(60))
            | beam.ParDo(BufferUntilWindowEnd()))
