"""Which of the elements that compare equal `Top` keeps, and in what order: `Top.Of / Largest /
Smallest / PerKey / LargestPerKey / SmallestPerKey` and `CombineGlobally(TopCombineFn)`,
`Largest`, `Smallest`, with key= and reverse=, over (score, name) pairs with many equal scores
and over numbers that compare equal but print differently (1, 1.0, True), in the global window
(where Beam's `Top.Of` combines per bundle) and in fixed windows; `Top.Of(...).without_defaults()`
over empty input; and `combiners.core.CombineGlobally` (Beam's combiners module has `core`, as
complete/top_wikipedia_sessions.py uses it)."""

from _sdk import beam, combiners, window


def _pairs():
    """600 (score, name) pairs: scores 0..6 (ties everywhere), names all distinct."""
    return [((i * 7 + i // 9) % 7, f"n{i:03d}") for i in range(600)]


def _score(x):
    return x[0]


def _fmt(name):
    return f"fmt_{name}" >> beam.Map(lambda x: f"{name} {x}")


def _fmt_reprs(name):
    return f"fmt_{name}" >> beam.Map(lambda xs: f"{name} {[repr(v) for v in xs]}")


def build(p, inputs):
    """Top's choice and order among equal elements, on Beam and on headrace."""
    outs = []
    pairs = p | "Pairs" >> beam.Create(_pairs())
    for n in (1, 5, 40):
        outs.append(pairs | f"Of{n}" >> combiners.Top.Of(n, key=_score) | _fmt(f"of_{n}"))
        outs.append(pairs | f"OfRev{n}" >> combiners.Top.Of(n, key=_score, reverse=True)
                    | _fmt(f"of_rev_{n}"))
        outs.append(pairs | f"Globally{n}" >> beam.CombineGlobally(combiners.TopCombineFn(n, key=_score))
                    | _fmt(f"globally_{n}"))
    outs.append(pairs | "Largest" >> combiners.Top.Largest(30, key=_score) | _fmt("largest"))
    outs.append(pairs | "Smallest" >> combiners.Top.Smallest(30, key=_score) | _fmt("smallest"))
    outs.append(pairs | "LargestND" >> combiners.Top.Largest(8, has_defaults=False, key=_score)
                | _fmt("largest_no_defaults"))
    outs.append(pairs | "CoreGlobally" >> combiners.core.CombineGlobally(
        combiners.TopCombineFn(12, key=_score, reverse=True)) | _fmt("core_globally"))
    keyed = pairs | "Keyed" >> beam.Map(lambda x: (f"k{int(x[1][1:]) % 5}", x))
    outs.append(keyed | "PerKey" >> combiners.Top.PerKey(9, key=_score) | _fmt("per_key"))
    outs.append(keyed | "PerKeyRev" >> combiners.Top.PerKey(9, key=_score, reverse=True)
                | _fmt("per_key_rev"))
    outs.append(keyed | "LargestPK" >> combiners.Top.LargestPerKey(4, key=_score) | _fmt("largest_per_key"))
    outs.append(keyed | "SmallestPK" >> combiners.Top.SmallestPerKey(4, key=_score)
                | _fmt("smallest_per_key"))
    nums = p | "Nums" >> beam.Create([1, 1.0, True, 2, 2.0, 0, False, 0.0, 2, 1.0, 0, 2.0, True] * 3)
    outs.append(nums | "NumsOf" >> combiners.Top.Of(7) | _fmt_reprs("nums_of"))
    outs.append(nums | "NumsSmallest" >> combiners.Top.Smallest(7) | _fmt_reprs("nums_smallest"))
    outs.append(nums | "NumsLargestFn" >> beam.CombineGlobally(combiners.Largest(7))
                | _fmt_reprs("nums_largest_fn"))
    outs.append(nums | "NumsSmallestFn" >> beam.CombineGlobally(combiners.Smallest(7))
                | _fmt_reprs("nums_smallest_fn"))
    empty = p | "Empty" >> beam.Create([]) | "EmptyPairs" >> beam.Map(lambda x: (x, x))
    outs.append(empty | "EmptyOf" >> combiners.Top.Of(3).without_defaults() | _fmt("empty_of_no_defaults"))
    outs.append(empty | "EmptyOfD" >> combiners.Top.Of(3) | _fmt("empty_of"))
    stamped = pairs | "Stamp" >> beam.Map(lambda x: window.TimestampedValue(x, int(x[1][1:]) % 3 * 10))
    fixed = stamped | "Fixed" >> beam.WindowInto(window.FixedWindows(10))
    fmt_w = beam.Map(lambda x, w=beam.DoFn.WindowParam: f"{w.start.micros} {x}")
    outs.append(fixed | "WOf" >> combiners.Top.Of(6, key=_score).without_defaults()
                | "fmt_w_of" >> fmt_w | _fmt("fixed_of"))
    outs.append(fixed | "WOfRev" >> combiners.Top.Of(6, key=_score, reverse=True).without_defaults()
                | "fmt_w_of_rev" >> fmt_w | _fmt("fixed_of_rev"))
    outs.append(fixed | "WKeyed" >> beam.Map(lambda x: (x[1][-1], x))
                | "WPerKey" >> combiners.Top.PerKey(3, key=_score) | "fmt_w_per_key" >> fmt_w
                | _fmt("fixed_per_key"))
    return [pc | f"Global{i}" >> beam.WindowInto(window.GlobalWindows()) for i, pc in enumerate(outs)
            ] | beam.Flatten()
