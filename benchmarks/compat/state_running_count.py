"""Per-key running counts kept in user state: a `CombiningValueStateSpec` (a count, a sum and a
max combined as elements arrive) and the same count kept by hand in a
`ReadModifyWriteStateSpec`, in fixed windows; a watermark timer reports each key's totals."""

from _sdk import (
    CombiningValueStateSpec, ReadModifyWriteStateSpec, TimeDomain, TimerSpec, beam, combiners,
    on_timer, window,
)


class LargestAmount(beam.CombineFn):
    """The largest amount added (-1 when none)."""

    def create_accumulator(self):
        """No amount yet."""
        return -1

    def add_input(self, largest, amount):
        """The larger of the two."""
        return max(largest, amount)

    def merge_accumulators(self, accumulators):
        """The largest of the accumulators."""
        return max(accumulators, default=-1)

    def extract_output(self, largest):
        """The largest amount."""
        return largest


class CountWithCombiningState(beam.DoFn):
    """Emits (key, running count) per element, and the key's count, sum and max at window end."""

    COUNT = CombiningValueStateSpec("count", beam.coders.VarIntCoder(), combiners.CountCombineFn())
    TOTAL = CombiningValueStateSpec("total", sum)
    LARGEST = CombiningValueStateSpec("largest", LargestAmount())
    REPORT = TimerSpec("report", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT),
                total=beam.DoFn.StateParam(TOTAL), largest=beam.DoFn.StateParam(LARGEST),
                report=beam.DoFn.TimerParam(REPORT)):
        key, amount = kv
        count.add(1)
        total.add(amount)
        largest.add(amount)
        report.set(w.max_timestamp())
        yield f"combining {key} [{w.start.micros // 1000000}s]: element #{count.read()}"

    @on_timer(REPORT)
    def on_report(self, key=beam.DoFn.KeyParam, w=beam.DoFn.WindowParam,
                  count=beam.DoFn.StateParam(COUNT), total=beam.DoFn.StateParam(TOTAL),
                  largest=beam.DoFn.StateParam(LARGEST)):
        yield (f"combining {key} [{w.start.micros // 1000000}s] total: count={count.read()} "
               f"sum={total.read()} max={largest.read()}")
        count.clear()
        total.clear()
        largest.clear()
        yield (f"combining {key} [{w.start.micros // 1000000}s] cleared: count={count.read()} "
               f"sum={total.read()} max={largest.read()}")


class CountWithReadModifyWrite(beam.DoFn):
    """The same running count kept in a single value: read, add one, write back."""

    COUNT = ReadModifyWriteStateSpec("count", beam.coders.VarIntCoder())

    def process(self, kv, w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT)):
        n = (count.read() or 0) + 1
        count.write(n)
        yield f"rmw {kv[0]} [{w.start.micros // 1000000}s]: element #{n}"


def build(p, inputs):
    """600 purchases of 9 customers over 20 minutes, in windows of 5 minutes."""
    purchases = (p
                 | beam.Create([(f"customer{i % 9}", (i * 37) % 101, i * 2) for i in range(600)])
                 | beam.Map(lambda r: window.TimestampedValue((r[0], r[1]), r[2]))
                 | beam.WindowInto(window.FixedWindows(300)))
    combining = purchases | "Combining" >> beam.ParDo(CountWithCombiningState())
    rmw = purchases | "ReadModifyWrite" >> beam.ParDo(CountWithReadModifyWrite())
    return (combining, rmw) | beam.Flatten()
