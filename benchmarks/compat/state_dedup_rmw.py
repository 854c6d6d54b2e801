"""Beam's classic de-duplication: a `ReadModifyWriteStateSpec` flag per event id remembers
that the id was seen, and a watermark timer clears it (at the end of the window, and after a
time-to-live in the global window); a `CombiningValueStateSpec` counts the duplicates dropped."""

from _sdk import (
    CombiningValueStateSpec, ReadModifyWriteStateSpec, TimeDomain, TimerSpec, beam, on_timer,
    window,
)


class DropDuplicates(beam.DoFn):
    """Emits an event id's first event per window, and the number of duplicates dropped."""

    SEEN = ReadModifyWriteStateSpec("seen", beam.coders.BooleanCoder())
    DUPLICATES = CombiningValueStateSpec("duplicates", sum)
    EXPIRY = TimerSpec("expiry", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, seen=beam.DoFn.StateParam(SEEN),
                duplicates=beam.DoFn.StateParam(DUPLICATES), expiry=beam.DoFn.TimerParam(EXPIRY)):
        if seen.read():
            duplicates.add(1)
            return
        seen.write(True)
        expiry.set(w.max_timestamp())
        yield f"window {w.start.micros // 1000000}s: {kv[0]} {kv[1]}"

    @on_timer(EXPIRY)
    def on_expiry(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                  seen=beam.DoFn.StateParam(SEEN), duplicates=beam.DoFn.StateParam(DUPLICATES)):
        if duplicates.read():
            yield f"window {w.start.micros // 1000000}s: {key} had {duplicates.read()} duplicates"
        seen.clear()
        duplicates.clear()


class DropDuplicatesWithTtl(beam.DoFn):
    """In the global window: an id is forgotten a minute (event time) after it was last seen."""

    SEEN = ReadModifyWriteStateSpec("seen", beam.coders.VarIntCoder())
    TTL = TimerSpec("ttl", TimeDomain.WATERMARK)

    def process(self, kv, ts=beam.DoFn.TimestampParam, seen=beam.DoFn.StateParam(SEEN),
                ttl=beam.DoFn.TimerParam(TTL)):
        count = seen.read()
        seen.write((count or 0) + 1)
        ttl.set(ts + 60)
        if count is None:
            yield f"global: {kv[0]} {kv[1]}"

    @on_timer(TTL)
    def on_ttl(self, key=beam.DoFn.KeyParam, seen=beam.DoFn.StateParam(SEEN)):
        yield f"global: {key} seen {seen.read()} times"
        seen.clear()


def _events():
    """1000 events; every third is re-sent 1 to 4 times, 7 to 28 seconds later."""
    events = []
    for i in range(1000):
        event_id, payload, t = f"ev{i:04d}", f"user{i % 13}:{(i * 7919) % 1000}", i * 3
        events.append((event_id, payload, t))
        if i % 3 == 0:
            for r in range(1, 1 + i % 4 + 1):
                events.append((event_id, payload, t + 7 * r))
    return events


def build(p, inputs):
    """The events in windows of ten minutes, and in the global window."""
    events = (p
              | beam.Create(_events())
              | beam.Map(lambda e: window.TimestampedValue((e[0], e[1]), e[2])))
    windowed = (events
                | beam.WindowInto(window.FixedWindows(600))
                | "Windowed" >> beam.ParDo(DropDuplicates())
                | "Global" >> beam.WindowInto(window.GlobalWindows()))
    ttl = events | "Ttl" >> beam.ParDo(DropDuplicatesWithTtl())
    return (windowed, ttl) | beam.Flatten()
