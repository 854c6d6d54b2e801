"""Beam's `DoFn.PaneInfoParam` and `TestStream(coder=...)` as a ported streaming program uses
them: a TestStream of JSON records (Beam's cookbook JSON coder), fixed windows with an
`AfterWatermark(early=AfterCount(3), late=AfterCount(1))` trigger and allowed lateness, in
accumulating (GroupByKey) and discarding (CombinePerKey) modes; each pane printed with its timing,
index, nonspeculative index, is_first and is_last, its window and `TimestampParam`. Every key gets
exactly three elements per early batch, so the early firings do not depend on how the runner
bundles a batch."""

import json

from _sdk import PaneInfoTiming, TestStream, beam, coders, trigger, window

STREAMING = True

KEYS = ["alpha", "beta", "gamma", "delta"]


class JsonCoder(coders.Coder):
    """A JSON coder interpreting each element as a JSON value (Beam's cookbook coder)."""

    def encode(self, x):
        return json.dumps(x, sort_keys=True).encode("utf-8")

    def decode(self, x):
        return json.loads(x)


_TIMING = {
    PaneInfoTiming.EARLY: "EARLY",
    PaneInfoTiming.ON_TIME: "ON_TIME",
    PaneInfoTiming.LATE: "LATE",
    PaneInfoTiming.UNKNOWN: "UNKNOWN",
}


class ShowPane(beam.DoFn):
    """One line per pane: key, sorted values or sum, window, timestamp, pane facts."""

    def __init__(self, mode):
        self.mode = mode

    def process(self, kv, pane=beam.DoFn.PaneInfoParam, w=beam.DoFn.WindowParam, ts=beam.DoFn.TimestampParam):
        key, value = kv
        shown = sorted(value) if self.mode == "acc" else value
        # timestamps in ms: Beam's runner encodes element timestamps in milliseconds
        yield (
            f"{self.mode} {key} [{w.start.micros // 1000}, {w.end.micros // 1000}) ts_ms={ts.micros // 1000} "
            f"{_TIMING[pane.timing]} index={pane.index} nonspec={pane.nonspeculative_index} "
            f"first={pane.is_first} last={pane.is_last} {shown}"
        )


def _stream():
    """Three rounds per minute-window: two early batches of 3 per key, then the watermark, then
    one late element per key within the allowed lateness."""
    ts = TestStream(coder=JsonCoder()).advance_watermark_to(0)
    n = 0
    for minute in range(4):
        base = minute * 60
        for batch in range(2):
            elems = []
            for k, key in enumerate(KEYS):
                for j in range(3):
                    n += 1
                    elems.append(window.TimestampedValue({"key": key, "v": n}, base + 10 * batch + j + k))
            ts = ts.add_elements(elems)
        # a key with only two more elements: no early firing for it
        ts = ts.add_elements(
            [
                window.TimestampedValue({"key": "alpha", "v": 1000 + minute}, base + 40),
                window.TimestampedValue({"key": "alpha", "v": 2000 + minute}, base + 41),
            ]
        )
        ts = ts.advance_watermark_to(base + 60)
        ts = ts.add_elements(
            [window.TimestampedValue({"key": key, "v": -minute - 1}, base + 30) for key in KEYS[:2]]
        )
        ts = ts.advance_watermark_to(base + 90)
    return ts.advance_watermark_to_infinity()


def _early_and_late_windows(mode):
    """Minute windows firing early every 3 elements and late per element, 2 minutes' lateness."""
    return beam.WindowInto(
        window.FixedWindows(60),
        trigger=trigger.AfterWatermark(early=trigger.AfterCount(3), late=trigger.AfterCount(1)),
        accumulation_mode=mode,
        allowed_lateness=120,
    )


def build(p, inputs):
    """The panes of accumulating and discarding windows over a TestStream of JSON records."""
    records = p | "Stream" >> _stream()
    pairs = records | "Pairs" >> beam.Map(lambda d: (d["key"], d["v"]))
    acc = (
        pairs
        | "AccWindows" >> _early_and_late_windows(trigger.AccumulationMode.ACCUMULATING)
        | "Group" >> beam.GroupByKey()
        | "ShowAcc" >> beam.ParDo(ShowPane("acc"))
    )
    dis = (
        pairs
        | "DisWindows" >> _early_and_late_windows(trigger.AccumulationMode.DISCARDING)
        | "Sum" >> beam.CombinePerKey(sum)
        | "ShowDis" >> beam.ParDo(ShowPane("dis"))
    )
    return (acc, dis) | beam.Flatten()
