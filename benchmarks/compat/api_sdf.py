"""Beam's Splittable DoFn API as a ported program uses it: an offset-range SDF over Create'd
elements with a separate RestrictionProvider that splits initially, a DoFn that is its own
RestrictionProvider and checkpoints itself (`defer_remainder`) every few claims, SDFs with a
ManualWatermarkEstimator and a MonotonicWatermarkEstimator whose timestamped outputs are then
windowed and counted; and the API's plain values: `OffsetRange.split / split_at / size`,
`OffsetRestrictionTracker` claims, splits and `check_done`, `RestrictionProgress`, the
estimators' default providers. Beam Python has no GrowableOffsetRangeTracker (only Beam Java
does), so headrace's is not used here.

Every headrace runner runs them."""

from _sdk import (
    OffsetRange, OffsetRestrictionTracker, RestrictionProgress, RestrictionProvider, Timestamp,
    beam, watermark_estimators, window,
)

FILES = [("alpha", 23), ("beta", 0), ("gamma", 1), ("delta", 17), ("eps", 64)]


class FileRanges(RestrictionProvider):
    """Element (name, size): the offsets [0, size), initially split into parts of 8."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def split(self, element, restriction):
        return restriction.split(8)


class ReadOffsets(beam.DoFn):
    """Outputs 'offset <name> <position>' for each claimed position."""

    def process(self, element, tracker=beam.DoFn.RestrictionParam(FileRanges())):
        r = tracker.current_restriction()
        for position in range(r.start, r.stop):
            if not tracker.try_claim(position):
                return
            yield f"offset {element[0]} {position} part=[{r.start},{r.stop})"


class CheckpointingReader(beam.DoFn, RestrictionProvider):
    """Its own RestrictionProvider; checkpoints after every 5 claims."""

    def initial_restriction(self, element):
        return OffsetRange(100, 100 + element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()

    def process(self, element, tracker=beam.DoFn.RestrictionParam()):
        position = tracker.current_restriction().start
        claimed = 0
        while tracker.try_claim(position):
            yield f"checkpointing {element[0]} {position}"
            position += 1
            claimed += 1
            if claimed == 5:
                tracker.defer_remainder()
                return


class ManualClock(beam.DoFn):
    """Positions as event seconds, the watermark set by hand to each position."""

    def process(self, element,
                tracker=beam.DoFn.RestrictionParam(FileRanges()),
                estimator=beam.DoFn.WatermarkEstimatorParam(
                    watermark_estimators.ManualWatermarkEstimator.default_provider())):
        r = tracker.current_restriction()
        for position in range(r.start, r.stop):
            if not tracker.try_claim(position):
                return
            estimator.set_watermark(Timestamp(position))
            yield window.TimestampedValue(element[0], position)


class MonotonicClock(beam.DoFn):
    """Positions as event seconds (every 3rd second), the watermark following the outputs."""

    def process(self, element,
                tracker=beam.DoFn.RestrictionParam(FileRanges()),
                estimator=beam.DoFn.WatermarkEstimatorParam(
                    watermark_estimators.MonotonicWatermarkEstimator.default_provider())):
        r = tracker.current_restriction()
        for position in range(r.start, r.stop):
            if not tracker.try_claim(position):
                return
            yield window.TimestampedValue(element[0], position * 3)


def _fmt_window(w):
    return f"[{w.start.micros // 1000}, {w.end.micros // 1000})"


class Windowed(beam.DoFn):
    """'<what> <window> <name> <count>'."""

    def __init__(self, what):
        self.what = what

    def process(self, kv, w=beam.DoFn.WindowParam):
        yield f"{self.what} {_fmt_window(w)} {kv[0]} {kv[1]}"


def _tracker_lines():
    """What OffsetRestrictionTracker answers to a few op sequences."""
    out = []
    ops = [
        [("claim", 3), ("split", 0.5), ("claim", 4), ("split", 0.0), ("claim", 5), ("done",)],
        [("split", 0.0), ("claim", 3), ("done",)],
        [("split", 0.25), ("split", 0.25), ("claim", 3), ("claim", 4), ("done",)],
        [("claim", 3), ("claim", 9), ("split", 0.5), ("claim", 12), ("done",)],
        [("claim", 3), ("claim", 3)],
        [("claim", 3), ("claim", 4), ("claim", 5), ("claim", 6), ("claim", 7), ("split", 0.5),
         ("split", 0.0), ("claim", 13), ("done",)],
        [("claim", 12), ("split", 0.0), ("split", 0.9), ("claim", 13), ("done",)],
        [("claim", 5), ("done",)],
    ]
    for i, seq in enumerate(ops):
        tracker = OffsetRestrictionTracker(OffsetRange(3, 13))
        answers = []
        for op in seq:
            try:
                if op[0] == "claim":
                    answers.append(str(tracker.try_claim(op[1])))
                elif op[0] == "split":
                    answers.append(repr(tracker.try_split(op[1])))
                else:
                    tracker.check_done()
                    answers.append("done")
            except ValueError:
                answers.append("ValueError")
        out.append(f"tracker {i} {' | '.join(answers)} -> {tracker.current_restriction()!r}"
                   f" start={tracker.start_position()} stop={tracker.stop_position()}"
                   f" bounded={tracker.is_bounded()}")
    return out


def _api_lines():
    """OffsetRange, RestrictionProgress and the estimators' providers, as plain values."""
    out = []
    for size, desired, minimum in [(20, 6, 1), (20, 7, 1), (21, 8, 1), (10, 3, 4), (9, 4, 2),
                                   (0, 5, 1), (1, 5, 1), (100, 30, 1), (33, 8, 1)]:
        parts = list(OffsetRange(0, size).split(desired, minimum))
        out.append(f"range split {size} {desired} {minimum}: {parts!r}")
    r = OffsetRange(4, 10)
    out.append(f"range {r!r} size={r.size()} split_at(7)={r.split_at(7)!r} "
               f"eq={r == OffsetRange(4, 10)} hash={hash(r) == hash(OffsetRange(4, 10))}")
    for kwargs in [dict(completed=3, remaining=7), dict(fraction=0.25),
                   dict(fraction=0.25, remaining=6), dict(fraction=0.5, completed=4),
                   dict(completed=0, remaining=0)]:
        p = RestrictionProgress(**kwargs)
        out.append(f"progress {sorted(kwargs.items())} completed={p.completed_work} "
                   f"remaining={p.remaining_work} total={p.total_work} "
                   f"fraction={p.fraction_completed} left={p.fraction_remaining}")
    p = RestrictionProgress(completed=3, remaining=7).with_completed(5)
    out.append(f"progress with_completed completed={p.completed_work} remaining={p.remaining_work}")
    for name in ("ManualWatermarkEstimator", "MonotonicWatermarkEstimator",
                 "WalltimeWatermarkEstimator"):
        provider = getattr(watermark_estimators, name).default_provider()
        state = provider.initial_estimator_state("x", OffsetRange(0, 1))
        estimator = provider.create_watermark_estimator(state)
        if name == "WalltimeWatermarkEstimator":
            shown = estimator.current_watermark() > Timestamp(1_600_000_000)
        else:
            shown = estimator.current_watermark()
        out.append(f"estimator {name} initial_state={state} watermark={shown} "
                   f"type={type(estimator).__name__}")
    manual = watermark_estimators.ManualWatermarkEstimator(None)
    manual.set_watermark(Timestamp(10))
    manual.set_watermark(Timestamp(10))
    try:
        manual.set_watermark(Timestamp(9))
        out.append("manual back: accepted")
    except ValueError:
        out.append("manual back: ValueError")
    out.append(f"manual watermark={manual.current_watermark().micros} "
               f"state={manual.get_estimator_state().micros}")
    mono = watermark_estimators.MonotonicWatermarkEstimator(Timestamp(5))
    for t in (7, 6, 9, 8):
        mono.observe_timestamp(Timestamp(t))
        out.append(f"monotonic observe {t} watermark={mono.current_watermark().micros}")
    out.append(f"monotonic state={mono.get_estimator_state().micros}")
    return out


def build(p, inputs):
    """Offset-range SDFs (split initially, checkpointing, with watermark estimators) and the
    SDF API's plain values."""
    files = p | "Files" >> beam.Create(FILES)
    outs = [
        files | "ReadOffsets" >> beam.ParDo(ReadOffsets()),
        files | "Checkpointing" >> beam.ParDo(CheckpointingReader()),
        files
        | "Manual" >> beam.ParDo(ManualClock())
        | "ManualWindows" >> beam.WindowInto(window.FixedWindows(10))
        | "ManualCount" >> beam.combiners.Count.PerElement()
        | "ManualFmt" >> beam.ParDo(Windowed("manual"))
        | "ManualGlobal" >> beam.WindowInto(window.GlobalWindows()),
        files
        | "Monotonic" >> beam.ParDo(MonotonicClock())
        | "MonotonicWindows" >> beam.WindowInto(window.FixedWindows(20))
        | "MonotonicCount" >> beam.combiners.Count.PerElement()
        | "MonotonicFmt" >> beam.ParDo(Windowed("monotonic"))
        | "MonotonicGlobal" >> beam.WindowInto(window.GlobalWindows()),
        p | "Api" >> beam.Create(_tracker_lines() + _api_lines()),
    ]
    return outs | beam.Flatten()
