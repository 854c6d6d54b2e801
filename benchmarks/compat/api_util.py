"""Beam's `transforms.util` as a ported program uses it: every `Regex` method (matches,
all_matches, matches_kv, find, find_all, find_kv, replace_all, replace_first, split),
`ToString.Element / Iterables / Kvs`, `Reify.Timestamp / Window / TimestampInValue /
WindowInValue` in fixed and global windows, `WithKeys` (constant and callable), `KvSwap`, `Keys`,
`Values`, `Distinct`, `Reshuffle`, `BatchElements` (only facts that do not depend on how the
runner batches: the union of the batches and that each size is in bounds) and `Tee`."""

from _sdk import beam, util, window

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa"]


def _log_lines(n):
    """n log lines like 'user7 GET /page/12 200 345ms'."""
    methods = ["GET", "POST", "PUT"]
    return [
        f"user{i % 13} {methods[i % 3]} /page/{i % 29} {200 if i % 7 else 404} {i * 37 % 997}ms"
        for i in range(n)
    ]


def _fmt_window(w):
    """A window as '[start_ms, end_ms)' or 'global'."""
    if isinstance(w, window.GlobalWindow):
        return "global"
    return f"[{w.start.micros // 1000}, {w.end.micros // 1000})"


def _regex(lines):
    """Every Regex method over the log lines, each result tagged with the method's name."""
    R = util.Regex
    outs = [
        lines | "matches" >> R.matches(r"user(\d+) (GET|POST)") | "m1" >> beam.Map(lambda s: f"matches {s}"),
        lines
        | "matches_group" >> R.matches(r"user(?P<u>\d+) GET", group="u")
        | "m2" >> beam.Map(lambda s: f"matches_group {s}"),
        lines
        | "all_matches" >> R.all_matches(r"user(\d+) (\w+) /page/(\d+)")
        | "m3" >> beam.Map(lambda xs: f"all_matches {'|'.join(xs)}"),
        lines
        | "matches_kv" >> R.matches_kv(r"user(\d+) (\w+)", 1, 2)
        | "m4" >> beam.Map(lambda kv: f"matches_kv {kv[0]}={kv[1]}"),
        lines | "find" >> R.find(r"/page/(\d+)", 1) | "m5" >> beam.Map(lambda s: f"find {s}"),
        lines | "find_all" >> R.find_all(r"\d+") | "m6" >> beam.Map(lambda xs: f"find_all {','.join(xs)}"),
        lines
        | "find_all_groups" >> R.find_all(r"(\d+)ms", group=R.ALL)
        | "m7" >> beam.Map(lambda xs: f"find_all_groups {xs!r}"),
        lines
        | "find_kv" >> R.find_kv(r"(POST|PUT) /page/(\d+)", 2, 1)
        | "m8" >> beam.Map(lambda kv: f"find_kv {kv[0]}={kv[1]}"),
        lines | "replace_all" >> R.replace_all(r"\d", "#") | "m9" >> beam.Map(lambda s: f"replace_all {s}"),
        lines
        | "replace_first" >> R.replace_first(r"/page/\d+", "/p")
        | "m10" >> beam.Map(lambda s: f"replace_first {s}"),
        lines | "split" >> R.split(r"[ /]") | "m11" >> beam.Map(lambda xs: f"split {xs!r}"),
        lines
        | "split_empty" >> R.split(r"[ /]", outputEmpty=True)
        | "m12" >> beam.Map(lambda xs: f"split_empty {xs!r}"),
    ]
    return outs


class _Tag(beam.DoFn):
    """Formats a Reify.Window / WindowInValue output."""

    def __init__(self, what):
        self.what = what

    def process(self, x):
        if self.what == "window":  # WindowedValue-like (value, timestamp, window)
            v, ts, w = x
            yield f"reify_window {v} ts={ts.micros} {_fmt_window(w)}"
        elif self.what == "window_in_value":
            k, (v, ts, w) = x
            yield f"reify_window_in_value {k} {v} ts={ts.micros} {_fmt_window(w)}"
        elif self.what == "timestamp_in_value":
            k, tv = x
            yield f"reify_timestamp_in_value {k} {tv.value} ts={tv.timestamp.micros}"


def build(p, inputs):
    """The util transforms over 1,300 log lines and 400 timestamped pairs."""
    lines = p | "Lines" >> beam.Create(_log_lines(1300))
    outs = _regex(lines)

    # ToString
    pairs = p | "Pairs" >> beam.Create([(WORDS[i % 10], i) for i in range(400)])
    outs.append(pairs | "Kvs" >> util.ToString.Kvs() | "ts1" >> beam.Map(lambda s: f"kvs {s}"))
    outs.append(
        pairs
        | "kvs_delim" >> util.ToString.Kvs(delimiter=":")
        | "ts1b" >> beam.Map(lambda s: f"kvs_delim {s}")
    )
    outs.append(pairs | "Element" >> util.ToString.Element() | "ts2" >> beam.Map(lambda s: f"element {s}"))
    outs.append(
        p
        | "Lists" >> beam.Create([[i, i * 2, WORDS[i % 10]] for i in range(50)])
        | "Iterables" >> util.ToString.Iterables(delimiter=";")
        | "ts3" >> beam.Map(lambda s: f"iterables {s}")
    )

    # Reify, in fixed windows of 30 s and in the global window
    stamped = pairs | "Stamp" >> beam.Map(lambda kv: window.TimestampedValue(kv, kv[1] * 0.5 + 0.25))
    fixed = stamped | "Fixed" >> beam.WindowInto(window.FixedWindows(30))
    outs.append(
        fixed
        | "ReifyTs" >> util.Reify.Timestamp()
        | "ts_after"
        >> beam.Map(lambda kv, t=beam.DoFn.TimestampParam: f"reify_timestamp {kv[0]} {kv[1]} {t.micros}")
    )
    outs.append(fixed | "ReifyWin" >> util.Reify.Window() | "fw" >> beam.ParDo(_Tag("window")))
    outs.append(stamped | "ReifyWinGlobal" >> util.Reify.Window() | "gw" >> beam.ParDo(_Tag("window")))
    outs.append(
        fixed
        | "ReifyTsInValue" >> util.Reify.TimestampInValue()
        | "tiv" >> beam.ParDo(_Tag("timestamp_in_value"))
    )
    outs.append(
        fixed | "ReifyWinInValue" >> util.Reify.WindowInValue() | "wiv" >> beam.ParDo(_Tag("window_in_value"))
    )

    # keys and values
    words = p | "Words" >> beam.Create([WORDS[i * 7 % 10] + str(i % 4) for i in range(600)])
    outs.append(
        words
        | "WithConstKey" >> util.WithKeys("const")
        | beam.GroupByKey()
        | "wck" >> beam.MapTuple(lambda k, vs: f"with_keys_const {k} {len(list(vs))}")
    )
    outs.append(
        words
        | "WithFnKey" >> util.WithKeys(lambda w: w[0])
        | "CountPerLetter" >> beam.combiners.Count.PerKey()
        | "wfk" >> beam.MapTuple(lambda k, n: f"with_keys_fn {k} {n}")
    )
    outs.append(
        pairs
        | util.KvSwap()
        | "SwapCount" >> beam.combiners.Count.PerKey()
        | "kvs_count" >> beam.combiners.Count.Globally()
        | "sw" >> beam.Map(lambda n: f"kvswap_keys {n}")
    )
    outs.append(
        pairs
        | util.Keys()
        | "DistinctKeys" >> util.Distinct()
        | "k" >> beam.Map(lambda k: f"distinct_key {k}")
    )
    outs.append(
        pairs
        | util.Values()
        | "SumValues" >> beam.CombineGlobally(sum)
        | "v" >> beam.Map(lambda s: f"values_sum {s}")
    )
    outs.append(words | "Dedup" >> beam.Distinct() | "d" >> beam.Map(lambda w: f"distinct {w}"))
    outs.append(
        fixed
        | "Reshuffle" >> util.Reshuffle()
        | "rs"
        >> beam.Map(
            lambda kv, t=beam.DoFn.TimestampParam, w=beam.DoFn.WindowParam: (
                f"reshuffle {kv[0]} {kv[1]} {t.micros} {_fmt_window(w)}"
            )
        )
    )
    outs.append(
        words
        | "ReshuffleBuckets" >> util.Reshuffle(num_buckets=3)
        | "RsCount" >> beam.combiners.Count.Globally()
        | "rsb" >> beam.Map(lambda n: f"reshuffle_buckets count {n}")
    )

    # BatchElements: only batch-independent facts
    nums = p | "Nums" >> beam.Create(list(range(1000)))
    batches = nums | util.BatchElements(min_batch_size=5, max_batch_size=40)
    outs.append(
        batches
        | "InBounds" >> beam.Map(lambda b: 1 <= len(b) <= 40)
        | "AllInBounds" >> beam.CombineGlobally(all)
        | "ib" >> beam.Map(lambda ok: f"batch_sizes_in_bounds {ok}")
    )
    outs.append(
        batches
        | "Unbatch" >> beam.FlatMap(lambda b: b)
        | "Union" >> beam.combiners.ToList()
        | "u" >> beam.Map(lambda xs: f"batch_union {sorted(xs) == list(range(1000))} {len(xs)}")
    )
    fixed_nums = (
        nums
        | "NumStamp" >> beam.Map(lambda n: window.TimestampedValue(n, n))
        | "NumFixed" >> beam.WindowInto(window.FixedWindows(100))
    )
    outs.append(
        fixed_nums
        | "BatchFixed" >> util.BatchElements(min_batch_size=3, max_batch_size=7)
        | "WinBatch"
        >> beam.Map(lambda b, w=beam.DoFn.WindowParam: (_fmt_window(w), (len(b) <= 7, sorted(b))))
        | "PerWin" >> beam.GroupByKey()
        | "pw"
        >> beam.MapTuple(
            lambda w, bs: (
                f"batch_window {w} all_small={all(ok for ok, _ in bs)} "
                f"union={sorted(x for _, b in bs for x in b)}"
            )
        )
    )

    # Tee
    teed = []
    tee_out = (
        words
        | "Tee"
        >> util.Tee(
            lambda pc: teed.append(
                pc
                | "TeeCount" >> beam.combiners.Count.Globally()
                | "tc" >> beam.Map(lambda n: f"tee_branch_count {n}")
            ),
            "TeeFirstLetters" >> (beam.Map(lambda w: w[0]) | "TeeDistinct" >> beam.Distinct()),
        )
        | "AfterTee" >> beam.Map(lambda w: w.upper())
        | "TeeDistinct2" >> beam.Distinct()
        | "tm" >> beam.Map(lambda w: f"tee_main {w}")
    )
    outs.append(tee_out)
    outs.extend(teed)
    # one windowing for the Flatten (Beam's DirectRunner cannot flatten mixed windowings)
    return [
        pc | f"Global{i}" >> beam.WindowInto(window.GlobalWindows()) for i, pc in enumerate(outs)
    ] | beam.Flatten()
