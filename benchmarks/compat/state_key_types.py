"""User state per key for keys of several Python types: ints, floats, a bool, strings, bytes,
tuples and None, each key with its own state.

No two keys compare equal in Python: Beam keys state by the encoded key, so 1, 1.0 and True
are three keys (as in headrace), but Beam 2.77's DirectRunner loses their state (it reports
one of them with no elements and the others not at all)."""

from _sdk import CombiningValueStateSpec, TimeDomain, TimerSpec, beam, on_timer


class CountPerKey(beam.DoFn):
    """Counts a key's elements and sums their values; reports both at the end."""

    COUNT = CombiningValueStateSpec("count", sum)
    TOTAL = CombiningValueStateSpec("total", sum)
    END = TimerSpec("end", TimeDomain.WATERMARK)

    def process(self, kv, w=beam.DoFn.WindowParam, count=beam.DoFn.StateParam(COUNT),
                total=beam.DoFn.StateParam(TOTAL), end=beam.DoFn.TimerParam(END)):
        count.add(1)
        total.add(kv[1])
        end.set(w.max_timestamp())

    @on_timer(END)
    def on_end(self, key=beam.DoFn.KeyParam, count=beam.DoFn.StateParam(COUNT),
               total=beam.DoFn.StateParam(TOTAL)):
        yield f"{type(key).__name__} {key!r}: {count.read()} elements, total {total.read()}"


KEYS = [0, 7, -1, 2**40, 1.5, -0.25, True, "1", "", "é", b"1", b"", (1,), (1, "a"), ("a", 1),
        ((2, 3), "b"), None, "None", "True", 10**20]


def build(p, inputs):
    """600 elements spread over 20 keys of mixed types."""
    return (p
            | beam.Create([(KEYS[i % len(KEYS)], i) for i in range(600)])
            | beam.ParDo(CountPerKey()))
