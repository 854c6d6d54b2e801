"""`OrderedListStateSpec` at its edges: equal timestamps (kept in the order added), timestamps
before the epoch and in microseconds, empty ranges, `read_range` and `clear_range` bounds
(the lower one included, the upper one excluded), adding after a partial clear, and a range
past every entry; each key's list is read by a watermark timer at the window's end."""

from _sdk import OrderedListStateSpec, TimeDomain, Timestamp, TimerSpec, beam, on_timer


class Edges(beam.DoFn):
    """Adds each (timestamp, value) to a key's ordered list; probes the list at the end."""

    ENTRIES = OrderedListStateSpec("entries", beam.coders.StrUtf8Coder())
    PROBE = TimerSpec("probe", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, entries=beam.DoFn.StateParam(ENTRIES),
                probe=beam.DoFn.TimerParam(PROBE)):
        key, (micros, value) = kv
        entries.add((Timestamp(micros=micros), value))
        probe.set(w.max_timestamp())

    @on_timer(PROBE)
    def on_probe(self, key=beam.DoFn.KeyParam, entries=beam.DoFn.StateParam(ENTRIES)):

        def show(pairs):
            # equal timestamps: the order added depends on the input order, so sort within one
            return sorted((t.micros, v) for t, v in pairs)

        yield f"{key} all: {show(entries.read())}"
        for lo, hi in ((-5_000_000, 0), (0, 1), (1, 1_000_001), (2_500_000, 2_500_000),
                       (3_000_000, 2_000_000), (-10**12, 10**12)):
            found = entries.read_range(Timestamp(micros=lo), Timestamp(micros=hi))
            yield f"{key} range [{lo}, {hi}): {show(found)}"
        entries.clear_range(Timestamp(micros=0), Timestamp(micros=1_000_001))
        yield f"{key} after clear_range [0, 1000001): {show(entries.read())}"
        entries.add((Timestamp(micros=500), "re-added"))
        entries.clear_range(Timestamp(micros=10**12), Timestamp(micros=10**13))
        yield f"{key} re-added, empty range cleared: {show(entries.read())}"
        entries.clear_range(Timestamp(micros=-10**12), Timestamp(micros=10**12))
        yield f"{key} all cleared: {show(entries.read())}"
        entries.add((Timestamp(micros=7), "after clear"))
        yield f"{key} added after clear: {show(entries.read())}"


def build(p, inputs):
    """6 keys, 900 entries at timestamps from -3 s to 3 s, many equal, some a microsecond apart."""
    stamps = [-3_000_000, -1, 0, 1, 999_999, 1_000_000, 1_000_001, 2_500_000, 2_999_999]
    entries = [(f"list{i % 6}", (stamps[(i * 7) % len(stamps)] + (i % 2) * (i % 3), f"v{i}"))
               for i in range(900)]
    return (p
            | beam.Create(entries)
            | beam.ParDo(Edges()))
