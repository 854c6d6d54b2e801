"""Beam's combiners as a ported program uses them: `Count.Globally / PerKey / PerElement`,
`Mean.Globally / PerKey`, `Top.Of / PerKey / Largest / Smallest / LargestPerKey /
SmallestPerKey` (with key= and reverse=), `Latest.Globally / PerKey`, `ToList / ToDict / ToSet`
(printed sorted), `TupleCombineFn`, `CombinePerKey(...).with_hot_key_fanout(n)` (an int and a
function of the key), `CombineGlobally(...).with_fanout(n)`, `CombineGlobally(...).without_defaults()`,
`Sample.FixedSizeGlobally / FixedSizePerKey` (only sizes and membership) and a user `CombineFn`,
in the global window and in fixed, sliding and session windows.

Sessions get no hot-key fanout: Beam re-assigns session windows between the fanout's two levels
(a documented, deliberate difference of headrace, docs/beam-compatibility.md)."""

from _sdk import beam, combiners, window

USERS = [f"u{i:02d}" for i in range(17)]


def _events():
    """2,400 (user, amount) purchases, one every 1.5 s, each user active in bursts."""
    out = []
    for i in range(2400):
        user = USERS[(i * 7 + i // 50) % 17]
        amount = (i * 37) % 101 + (i % 3) * 0.5
        t = i * 1.5 + (i % 5) * 0.1
        if (i // 40) % 4 == 3:  # a quiet stretch every 160 events: gaps for the sessions
            t += 3600 * (i // 160)
        out.append((user, amount, t))
    return out


def _fmt_window(w):
    """A window as '[start_ms, end_ms)' or 'global'."""
    if isinstance(w, window.GlobalWindow):
        return "global"
    return f"[{w.start.micros // 1000}, {w.end.micros // 1000})"


def _tagged(name):
    """A Map labelled 'fmt_<name>' that prints 'name window value'."""

    def fmt(x, w=beam.DoFn.WindowParam):
        return f"{name} {_fmt_window(w)} {x}"

    return f"fmt_{name}" >> beam.Map(fmt)


class _SpreadFn(beam.CombineFn):
    """A user CombineFn: (min, max, count) of the amounts."""

    def create_accumulator(self):
        return (None, None, 0)

    def add_input(self, acc, x):
        lo, hi, n = acc
        return (x if lo is None else min(lo, x), x if hi is None else max(hi, x), n + 1)

    def merge_accumulators(self, accs):
        lo, hi, n = None, None, 0
        for a_lo, a_hi, a_n in accs:
            if a_lo is not None:
                lo = a_lo if lo is None else min(lo, a_lo)
                hi = a_hi if hi is None else max(hi, a_hi)
            n += a_n
        return (lo, hi, n)

    def extract_output(self, acc):
        return f"min={acc[0]} max={acc[1]} n={acc[2]}"


def _per_key(name, pc, transform):
    """Applies a per-key combiner and prints 'name window key value'."""
    return (
        pc
        | name >> transform
        | f"fmt_{name}"
        >> beam.MapTuple(lambda k, v, w=beam.DoFn.WindowParam: f"{name} {_fmt_window(w)} {k} {v}")
    )


def _global_window(p, kvs, amounts, outs):
    """Everything in the global window (combiners with their defaults)."""
    outs.append(amounts | "CountG" >> combiners.Count.Globally() | _tagged("count_globally"))
    outs.append(_per_key("count_per_key", kvs, combiners.Count.PerKey()))
    outs.append(
        kvs
        | "Users" >> beam.Keys()
        | "CountPerElement" >> combiners.Count.PerElement()
        | "fmt_cpe" >> beam.MapTuple(lambda k, n: f"count_per_element {k} {n}")
    )
    outs.append(
        amounts
        | "MeanG" >> combiners.Mean.Globally()
        | beam.Map(lambda m: round(m, 9))
        | _tagged("mean_globally")
    )
    outs.append(
        _per_key(
            "mean_per_key",
            kvs,
            combiners.Mean.PerKey() | "RoundMean" >> beam.MapTuple(lambda k, m: (k, round(m, 9))),
        )
    )
    outs.append(amounts | "TopOf" >> combiners.Top.Of(5) | _tagged("top_of"))
    outs.append(
        amounts | "TopOfKey" >> combiners.Top.Of(5, key=lambda a: (a % 10, a)) | _tagged("top_of_key")
    )
    outs.append(
        amounts
        | "TopOfRev" >> combiners.Top.Of(4, key=lambda a: (a % 7, a), reverse=True)
        | _tagged("top_of_reverse")
    )
    outs.append(amounts | "Largest" >> combiners.Top.Largest(6) | _tagged("largest"))
    outs.append(amounts | "Smallest" >> combiners.Top.Smallest(6) | _tagged("smallest"))
    outs.append(_per_key("top_per_key", kvs, combiners.Top.PerKey(3)))
    outs.append(_per_key("top_per_key_key", kvs, combiners.Top.PerKey(3, key=lambda a: (-(a % 13), a))))
    outs.append(_per_key("largest_per_key", kvs, combiners.Top.LargestPerKey(2)))
    outs.append(_per_key("smallest_per_key", kvs, combiners.Top.SmallestPerKey(2, key=lambda a: (a % 11, a))))
    outs.append(amounts | "LatestG" >> combiners.Latest.Globally() | _tagged("latest_globally"))
    outs.append(_per_key("latest_per_key", kvs, combiners.Latest.PerKey()))
    outs.append(
        amounts
        | "ToList" >> combiners.ToList()
        | beam.Map(lambda xs: (len(xs), sorted(xs)[:20]))
        | _tagged("to_list")
    )
    outs.append(
        kvs | "ToDict" >> combiners.ToDict() | beam.Map(lambda d: sorted(d)) | _tagged("to_dict_keys")
    )
    outs.append(
        kvs | "Users2" >> beam.Keys() | "ToSet" >> combiners.ToSet() | beam.Map(sorted) | _tagged("to_set")
    )
    outs.append(
        _per_key(
            "tuple_combine",
            kvs | "Pairs" >> beam.MapTuple(lambda k, a: (k, (a, a, 1))),
            beam.CombinePerKey(beam.combiners.TupleCombineFn(max, min, sum)),
        )
    )
    outs.append(
        _per_key(
            "tuple_common",
            kvs,
            beam.CombinePerKey(
                beam.combiners.TupleCombineFn(combiners.CountCombineFn(), max).with_common_input()
            ),
        )
    )
    outs.append(_per_key("hot_key_fanout", kvs, beam.CombinePerKey(sum).with_hot_key_fanout(4)))
    outs.append(
        _per_key(
            "hot_key_fanout_fn",
            kvs,
            beam.CombinePerKey(_SpreadFn()).with_hot_key_fanout(lambda k: 3 if k < "u05" else 0),
        )
    )
    outs.append(amounts | "WithFanout" >> beam.CombineGlobally(sum).with_fanout(3) | _tagged("with_fanout"))
    outs.append(amounts | "SpreadG" >> beam.CombineGlobally(_SpreadFn()) | _tagged("spread_globally"))
    empty = p | "Empty" >> beam.Create([]) | "EmptyInts" >> beam.Map(int)
    outs.append(empty | "EmptySum" >> beam.CombineGlobally(sum) | _tagged("empty_sum"))
    outs.append(empty | "EmptyCount" >> combiners.Count.Globally() | _tagged("empty_count"))
    outs.append(empty | "EmptyMean" >> combiners.Mean.Globally() | _tagged("empty_mean"))
    outs.append(empty | "EmptyToList" >> combiners.ToList() | _tagged("empty_to_list"))
    # Sample: sizes and membership only
    all_amounts = {a for _, a, _ in _events()}
    outs.append(
        amounts
        | "SampleG" >> combiners.Sample.FixedSizeGlobally(10)
        | beam.Map(lambda xs: f"len={len(xs)} members={all(x in all_amounts for x in xs)}")
        | _tagged("sample_globally")
    )
    per_user = {}
    for u, a, _ in _events():
        per_user.setdefault(u, []).append(a)
    outs.append(
        kvs
        | "SamplePK" >> combiners.Sample.FixedSizePerKey(4)
        | "fmt_spk"
        >> beam.MapTuple(
            lambda k, xs: f"sample_per_key {k} len={len(xs)} members={all(x in per_user[k] for x in xs)}"
        )
    )


def _windowed(name, kvs, amounts, outs, sessions=False):
    """The combiners that run in non-global windows (global ones without defaults)."""
    outs.append(
        amounts | f"{name}Sum" >> beam.CombineGlobally(sum).without_defaults() | _tagged(f"{name}_sum")
    )
    outs.append(
        amounts | f"{name}Count" >> combiners.Count.Globally().without_defaults() | _tagged(f"{name}_count")
    )
    outs.append(
        amounts
        | f"{name}Mean" >> combiners.Mean.Globally().without_defaults()
        | f"{name}RoundM" >> beam.Map(lambda m: round(m, 9))
        | _tagged(f"{name}_mean")
    )
    outs.append(
        amounts
        | f"{name}Spread" >> beam.CombineGlobally(_SpreadFn()).without_defaults()
        | _tagged(f"{name}_spread")
    )
    outs.append(
        amounts
        | f"{name}Largest" >> combiners.Top.Largest(3, has_defaults=False)
        | _tagged(f"{name}_largest")
    )
    outs.append(
        amounts
        | f"{name}ToList" >> combiners.ToList(has_defaults=False)
        | f"{name}Sorted" >> beam.Map(sorted)
        | _tagged(f"{name}_to_list")
    )
    outs.append(
        amounts
        | f"{name}Latest" >> combiners.Latest.Globally().without_defaults()
        | _tagged(f"{name}_latest")
    )
    outs.append(_per_key(f"{name}_count_per_key", kvs, combiners.Count.PerKey()))
    outs.append(
        _per_key(
            f"{name}_mean_per_key",
            kvs,
            combiners.Mean.PerKey() | f"{name}RoundMK" >> beam.MapTuple(lambda k, m: (k, round(m, 9))),
        )
    )
    outs.append(_per_key(f"{name}_top_per_key", kvs, combiners.Top.PerKey(2, key=lambda a: (a % 9, a))))
    outs.append(_per_key(f"{name}_smallest_per_key", kvs, combiners.Top.SmallestPerKey(2)))
    outs.append(_per_key(f"{name}_latest_per_key", kvs, combiners.Latest.PerKey()))
    outs.append(
        _per_key(
            f"{name}_to_set_per_key",
            kvs,
            beam.CombinePerKey(combiners.ToSetCombineFn())
            | f"{name}SortSet" >> beam.MapTuple(lambda k, s: (k, sorted(s))),
        )
    )
    outs.append(
        _per_key(
            f"{name}_tuple",
            kvs,
            beam.CombinePerKey(beam.combiners.TupleCombineFn(max, min).with_common_input()),
        )
    )
    outs.append(
        kvs
        | f"{name}SamplePK" >> combiners.Sample.FixedSizePerKey(2)
        | f"fmt_{name}_spk"
        >> beam.MapTuple(
            lambda k, xs, w=beam.DoFn.WindowParam: f"{name}_sample_per_key {_fmt_window(w)} {k} len={len(xs)}"
        )
    )
    if not sessions:
        outs.append(_per_key(f"{name}_hot_key_fanout", kvs, beam.CombinePerKey(sum).with_hot_key_fanout(3)))
        outs.append(
            _per_key(
                f"{name}_hot_key_fanout_spread", kvs, beam.CombinePerKey(_SpreadFn()).with_hot_key_fanout(2)
            )
        )
        outs.append(
            amounts
            | f"{name}WithFanout" >> beam.CombineGlobally(sum).with_fanout(2).without_defaults()
            | _tagged(f"{name}_with_fanout")
        )


def build(p, inputs):
    """The combiners over 2,400 purchases in the global, fixed, sliding and session windows."""
    events = (
        p
        | beam.Create(_events())
        | "Stamp" >> beam.MapTuple(lambda u, a, t: window.TimestampedValue((u, a), t))
    )
    outs = []
    kvs = events
    amounts = events | "Amounts" >> beam.Values()
    _global_window(p, kvs, amounts, outs)
    for name, fn in [
        ("fixed", window.FixedWindows(600)),
        ("sliding", window.SlidingWindows(900, 300)),
        ("sessions", window.Sessions(120)),
    ]:
        w_kvs = kvs | f"Into{name}" >> beam.WindowInto(fn)
        w_amounts = w_kvs | f"{name}Amounts" >> beam.Values()
        _windowed(name, w_kvs, w_amounts, outs, sessions=(name == "sessions"))
    # one windowing for the Flatten (Beam's DirectRunner cannot flatten mixed windowings)
    return [
        pc | f"Global{i}" >> beam.WindowInto(window.GlobalWindows()) for i, pc in enumerate(outs)
    ] | beam.Flatten()
