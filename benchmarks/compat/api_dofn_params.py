"""Beam's DoFn parameters and side inputs as a ported program uses them: `AsSingleton` (with and
without a default), `AsList`, `AsDict`, `AsIter` side inputs to Map / FlatMap / ParDo, passed
positionally and by keyword, `DoFn.SideInputParam` defaults, extra plain positional and keyword
arguments, `DoFn.TimestampParam` and `DoFn.WindowParam` in fixed and sliding windows (with
windowed side inputs), tagged outputs (`with_outputs` with a main output and `pvalue.TaggedOutput`)
and `setup / start_bundle / finish_bundle` effects that do not depend on bundling (a counter of
elements emitted per bundle, summed, from `GlobalWindows.windowed_value` in finish_bundle).

A plain keyword argument's parameter comes after the special ones: Beam Python's DirectRunner
(runners/common.py `_get_arg_placeholders`) leaves no slot for a defaulted parameter whose value
comes by keyword, so a special parameter declared after it shifts into its place ("got multiple
values for argument")."""

from _sdk import beam, window

CITIES = ["oslo", "lima", "rome", "kyiv", "baku", "doha", "riga", "bern"]


def _orders():
    """1,600 (city, amount, event seconds) orders."""
    return [(CITIES[(i * 5) % 8], (i * 29) % 97 + 1, i * 2.5) for i in range(1600)]


def _fmt_window(w):
    """A window as '[start_ms, end_ms)' or 'global'."""
    if isinstance(w, window.GlobalWindow):
        return "global"
    return f"[{w.start.micros // 1000}, {w.end.micros // 1000})"


class Enrich(beam.DoFn):
    """Looks up a city's rate (AsDict), the global threshold (AsSingleton) and the VIP list
    (AsList / AsIter, a SideInputParam default) and takes an extra keyword argument."""

    def setup(self):
        self.prefix = "enriched"

    def process(
        self,
        order,
        rates,
        threshold,
        vips=beam.DoFn.SideInputParam,
        ts=beam.DoFn.TimestampParam,
        label="none",  # after the special parameters: see the module docstring
    ):
        city, amount, _ = order
        big = amount * rates[city] >= threshold
        vip = city in vips
        yield f"{self.prefix} {label} {city} {amount} rate={rates[city]} big={big} vip={vip} ts={ts.micros}"


class EnrichByKeyword(beam.DoFn):
    """Side inputs and an extra argument given by keyword (a DoFn without special parameters:
    Beam's DirectRunner passes a DoFn with them its side inputs positionally)."""

    def process(self, order, rates=None, threshold=None, vips=(), label="kw"):
        city, amount, _ = order
        big = amount * rates[city] >= threshold
        yield f"by_keyword {label} {city} {amount} big={big} vip={city in list(vips)}"


class Split(beam.DoFn):
    """Tagged outputs: small orders on the main output, large ones and cities on tags."""

    def process(self, order, limit):
        city, amount, _ = order
        if amount > limit:
            yield beam.pvalue.TaggedOutput("large", f"{city}:{amount}")
        else:
            yield f"{city}:{amount}"
        if amount % 10 == 0:
            yield beam.pvalue.TaggedOutput("round", city)


class CountPerBundle(beam.DoFn):
    """Counts elements per bundle and emits the count in finish_bundle (summed downstream)."""

    def start_bundle(self):
        self.n = 0

    def process(self, x):
        self.n += 1

    def finish_bundle(self):
        yield window.GlobalWindows.windowed_value(self.n)


class WindowedFacts(beam.DoFn):
    """TimestampParam and WindowParam in windows, with a windowed AsSingleton side input."""

    def process(self, kv, window_total, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam):
        city, amount = kv
        # in milliseconds: Beam's runner encodes element timestamps in milliseconds, so the
        # combine's output at the window's max timestamp (end - 1 µs) comes back as end - 1 ms;
        # headrace keeps the microsecond (docs/beam-compatibility.md)
        share = amount / window_total
        yield f"windowed {_fmt_window(w)} {city} {amount} ts_ms={ts.micros // 1000} share={share:.6f}"


def build(p, inputs):
    """Side inputs, extra arguments, timestamps, windows and tagged outputs over 1,600 orders."""
    orders = p | "Orders" >> beam.Create(_orders())
    rates = p | "Rates" >> beam.Create([(c, 1 + i % 3) for i, c in enumerate(CITIES)])
    threshold = p | "Threshold" >> beam.Create([150])
    vips = p | "Vips" >> beam.Create(["oslo", "doha", "bern"])
    outs = []

    stamped = orders | "Stamp" >> beam.Map(lambda o: window.TimestampedValue(o, o[2]))
    outs.append(
        stamped
        | "Enrich"
        >> beam.ParDo(
            Enrich(),
            beam.pvalue.AsDict(rates),
            beam.pvalue.AsSingleton(threshold),
            beam.pvalue.AsList(vips),
            label="pos",
        )
    )
    outs.append(
        orders
        | "EnrichKw"
        >> beam.ParDo(
            EnrichByKeyword(),
            rates=beam.pvalue.AsDict(rates),
            threshold=beam.pvalue.AsSingleton(threshold),
            vips=beam.pvalue.AsIter(vips),
        )
    )
    # Map / FlatMap with side inputs and extra arguments
    outs.append(
        orders
        | "MapSide"
        >> beam.Map(
            lambda o, total, mult, suffix="": f"map_side {o[0]} {o[1] * mult}/{total}{suffix}",
            beam.pvalue.AsSingleton(
                orders | "Total" >> beam.Map(lambda o: o[1]) | "SumAll" >> beam.CombineGlobally(sum)
            ),
            3,
            suffix="!",
        )
    )
    outs.append(
        orders
        | "FlatMapIter"
        >> beam.FlatMap(
            lambda o, cities: [f"flat_iter {o[0]} {c}" for c in cities if c < o[0]][:2],
            beam.pvalue.AsIter(p | "SomeCities" >> beam.Create(CITIES[:4])),
        )
    )
    empty = p | "Nothing" >> beam.Create([]) | "NothingInt" >> beam.Map(int)
    outs.append(
        orders
        | "DefaultSingleton"
        >> beam.Map(
            lambda o, d: f"default_singleton {o[0]} {d}", beam.pvalue.AsSingleton(empty, default_value=-1)
        )
        | "DS" >> beam.Distinct()
    )
    outs.append(
        orders
        | "EmptyList" >> beam.Map(lambda o, xs: f"empty_list {o[0]} {xs}", beam.pvalue.AsList(empty))
        | "EL" >> beam.Distinct()
    )

    # tagged outputs
    split = orders | "Split" >> beam.ParDo(Split(), 60).with_outputs("large", "round", main="small")
    outs.append(
        split.small
        | "SmallCount" >> beam.combiners.Count.Globally()
        | "FS" >> beam.Map(lambda n: f"small {n}")
    )
    outs.append(split.large | "LargeDistinct" >> beam.Distinct() | "FL" >> beam.Map(lambda s: f"large {s}"))
    outs.append(
        split["round"]
        | "RoundCount" >> beam.combiners.Count.PerElement()
        | "FR" >> beam.MapTuple(lambda c, n: f"round {c} {n}")
    )
    unnamed = orders | "SplitUnnamed" >> beam.ParDo(Split(), limit=90).with_outputs("large", "round")
    outs.append(
        unnamed.large
        | "UL" >> beam.combiners.Count.Globally()
        | "FUL" >> beam.Map(lambda n: f"unnamed_large {n}")
    )
    outs.append(
        unnamed[None]
        | "UM" >> beam.combiners.Count.Globally()
        | "FUM" >> beam.Map(lambda n: f"unnamed_main {n}")
    )

    # bundle effects that do not depend on bundling
    outs.append(
        orders
        | "PerBundle" >> beam.ParDo(CountPerBundle())
        | "SumBundles" >> beam.CombineGlobally(sum)
        | "FB" >> beam.Map(lambda n: f"bundle_counts_total {n}")
    )

    # TimestampParam / WindowParam in fixed and sliding windows, with windowed side inputs
    for name, fn in [("fixed", window.FixedWindows(300)), ("sliding", window.SlidingWindows(600, 200))]:
        w_orders = stamped | f"{name}Into" >> beam.WindowInto(fn)
        totals = (
            w_orders
            | f"{name}Amount" >> beam.Map(lambda o: o[1])
            | f"{name}Total" >> beam.CombineGlobally(sum).without_defaults()
        )
        per_city = (
            w_orders
            | f"{name}Pairs" >> beam.Map(lambda o: (o[0], o[1]))
            | f"{name}PerCity" >> beam.CombinePerKey(sum)
        )
        outs.append(
            per_city
            | f"{name}Facts" >> beam.ParDo(WindowedFacts(), beam.pvalue.AsSingleton(totals))
            | f"{name}Global" >> beam.WindowInto(window.GlobalWindows())
        )
        outs.append(
            w_orders
            | f"{name}Ts"
            >> beam.Map(
                lambda o, ts=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam: (
                    f"{name} {o[0]} {ts.micros} {_fmt_window(w)}"
                )
            )
            | f"{name}Global2" >> beam.WindowInto(window.GlobalWindows())
        )
    return outs | beam.Flatten()
