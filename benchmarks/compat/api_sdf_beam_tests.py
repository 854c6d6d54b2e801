"""The shapes Beam's own Splittable DoFn tests run (the DirectRunner's SDF tests and the
portable runner's), as one program: ReadFiles over files of 99, 101 and 300 lines, with and
without checkpointing every 10 lines (`process(self, element, restriction_tracker=..., *args,
**kwargs)`); ExpandStrings over timestamped elements in sliding windows (`DoFn.WindowParam`,
extra non-side-input arguments); the expanding-strings SDF whose provider splits each string in
halves, with the DoFn its own RestrictionProvider, checkpointing at every odd position (with a
metrics counter), tracking a ManualWatermarkEstimator (`defer_remainder(Duration(micros=5))`),
and its own WatermarkEstimatorProvider (`WatermarkEstimatorParam()`); an SDF that outputs what
each call claimed as one list (flattened, and counted, here: where a call ends is the runner's
choice; output when it claimed its last position, see EnumerateSdf); an SDF over a tracker
subclass that only checkpoints; an SDF that leaves its restriction unfinished fails the
pipeline; `@DoFn.unbounded_per_element()` makes an unbounded PCollection; `truncate` (default
and overridden) as plain values.

The own-estimator lines (the watermark a part starts from) assume, as api_sdf_snippets' do,
that the runner does not split restrictions itself. Not here: Beam's test of an SDF with side
inputs (`AsList`, `AsSingleton`), since headrace refuses an SDF with side inputs when the
pipeline is built."""

import os
import random

from _sdk import (
    OffsetRange, OffsetRestrictionTracker, PipelineOptions, RestrictionProvider, Timestamp, beam,
    trigger, watermark_estimators, window,
)

_LINE_COUNTS = (99, 101, 300)


def make_inputs(d):
    """Writes one file of each line count (distinct lines, none empty)."""
    rng = random.Random(77)
    sub = os.path.join(d, "sdf_beam_tests")
    os.makedirs(sub, exist_ok=True)
    for n in _LINE_COUNTS:
        with open(os.path.join(sub, f"records-{n}.txt"), "w", encoding="utf-8") as fh:
            for i in range(n):
                fh.write(f"record {n}-{i} " + "x" * rng.randint(0, 30) + "\n")


# ---- ReadFiles (the DirectRunner's SDF tests) --------------------------------------------


class ReadFilesProvider(RestrictionProvider):
    """A file's bytes, not split initially."""

    def initial_restriction(self, element):
        return OffsetRange(0, os.path.getsize(element))

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class ReadFiles(beam.DoFn):
    """A file's lines (as bytes, stripped), checkpointing every `resume_count` lines if given."""

    def __init__(self, resume_count=None):
        self._resume_count = resume_count

    def process(self, element, restriction_tracker=beam.DoFn.RestrictionParam(ReadFilesProvider()),
                *args, **kwargs):
        with open(element, "rb") as f:
            pos = restriction_tracker.current_restriction().start
            if pos > 0:
                f.seek(pos - 1)
                pos = pos - 1 + len(f.readline())
            outputs = 0
            while restriction_tracker.try_claim(pos):
                line = f.readline()
                if not line.strip():
                    break
                yield line.strip()
                outputs += 1
                if self._resume_count and outputs == self._resume_count:
                    restriction_tracker.defer_remainder()
                    break
                pos += len(line)


# ---- ExpandStrings ------------------------------------------------------------------------


class ExpandStringsProvider(RestrictionProvider):
    """Element (s, t): the offsets of s; no initial split."""

    def initial_restriction(self, element):
        return OffsetRange(0, len(element[0]))

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction):
        return [restriction]

    def restriction_size(self, element, restriction):
        return restriction.size()


class ExpandStrings(beam.DoFn):
    """Per claimed offset, the element (or 's:t:window start'), once per value of the extra
    arguments (lists) when they have any."""

    def __init__(self, record_window=False):
        self._record_window = record_window

    def process(self, element, side1, side2, side3, window=beam.DoFn.WindowParam,
                restriction_tracker=beam.DoFn.RestrictionParam(ExpandStringsProvider()),
                *args, **kwargs):
        side = list(side1) + list(side2) + list(side3)
        r = restriction_tracker.current_restriction()
        for i in range(r.start, r.stop):
            if not restriction_tracker.try_claim(i):
                break
            out = (f"{element[0]}:{element[1]}:{int(window.start)}" if self._record_window
                   else element)
            if not side:
                yield out
            for val in side:
                yield f"{out}:{val}"


# ---- the portable runner's SDF tests ---------------------------------------------------------


class HalvingProvider(RestrictionProvider):
    """A string's offsets, split initially into halves."""

    def initial_restriction(self, element):
        return OffsetRange(0, len(element))

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction):
        return restriction.split(restriction.size() // 2)

    def restriction_size(self, element, restriction):
        return restriction.size()


class ExpandingStringsDoFn(beam.DoFn):
    """Each character of the element."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(HalvingProvider())):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            yield element[cur]
            cur += 1


class SelfProvidingExpandingStringsDoFn(beam.DoFn, HalvingProvider):
    """Each character, the DoFn its own RestrictionProvider."""

    def process(self, element, restriction_tracker=beam.DoFn.RestrictionParam()):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            yield element[cur]
            cur += 1


class CheckpointingExpandStringsDoFn(beam.DoFn):
    """Each character, checkpointing after every odd offset; counts the characters."""

    def __init__(self):
        self.counter = beam.metrics.Metrics.counter("ns", "my_counter")

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(HalvingProvider())):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            self.counter.inc()
            yield element[cur]
            if cur % 2 == 1:
                restriction_tracker.defer_remainder()
                return
            cur += 1


class WatermarkTrackingDoFn(beam.DoFn):
    """Each character at its offset in seconds, setting a manual watermark to each offset and
    checkpointing 5 microseconds after every odd one."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(HalvingProvider()),
                watermark_estimator=beam.DoFn.WatermarkEstimatorParam(
                    watermark_estimators.ManualWatermarkEstimator.default_provider())):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            watermark_estimator.set_watermark(Timestamp(cur))
            if watermark_estimator.current_watermark() != Timestamp(cur):
                raise AssertionError(f"watermark {watermark_estimator.current_watermark()}")
            yield window.TimestampedValue(element[cur], cur)
            if cur % 2 == 1:
                restriction_tracker.defer_remainder(beam.utils.timestamp.Duration(micros=5))
                return
            cur += 1


class OwnEstimatorDoFn(beam.DoFn, beam.WatermarkEstimatorProvider):
    """WatermarkTrackingDoFn as its own WatermarkEstimatorProvider (a ManualWatermarkEstimator
    starting from the offset before the restriction)."""

    def initial_estimator_state(self, element, restriction):
        return Timestamp(restriction.start - 1) if restriction.start > 0 else None

    def create_watermark_estimator(self, state):
        return beam.io.watermark_estimators.ManualWatermarkEstimator(state)

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(HalvingProvider()),
                watermark_estimator=beam.DoFn.WatermarkEstimatorParam()):
        cur = restriction_tracker.current_restriction().start
        initial = watermark_estimator.current_watermark()
        while restriction_tracker.try_claim(cur):
            watermark_estimator.set_watermark(Timestamp(cur))
            yield window.TimestampedValue(
                f"{element[cur]} from {None if initial is None else initial.micros // 10 ** 6}"
                if cur == restriction_tracker.current_restriction().start else element[cur], cur)
            if cur % 2 == 1:
                restriction_tracker.defer_remainder(beam.utils.timestamp.Duration(micros=5))
                return
            cur += 1


class EnumerateProvider(RestrictionProvider):
    """Element x: the offsets [0, x), not split initially."""

    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, element, restriction):
        return [restriction]

    def restriction_size(self, element, restriction):
        return restriction.size()

    def is_bounded(self):
        return True


class EnumerateSdf(beam.DoFn):
    """(x, k) for k in range(x), what one call claimed as one list, output once it claimed the
    restriction's last position (Beam's test outputs the list after the claim that fails, which
    headrace refuses, as Beam Java does: docs/beam-compatibility.md)."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(EnumerateProvider())):
        to_emit = []
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            to_emit.append((element, cur))
            if cur == restriction_tracker.current_restriction().stop - 1:
                yield to_emit
            cur += 1


class CheckpointOnlyOffsetRestrictionTracker(OffsetRestrictionTracker):
    """An offset tracker that splits only as a checkpoint (at fraction 0)."""

    def try_split(self, unused_fraction_of_remainder):
        return super().try_split(0.0)


class CheckpointOnlyProvider(EnumerateProvider):
    """EnumerateProvider over CheckpointOnlyOffsetRestrictionTracker."""

    def create_tracker(self, restriction):
        return CheckpointOnlyOffsetRestrictionTracker(restriction)


class EveryThirdCheckpoint(beam.DoFn):
    """(x, k) for k in range(x), checkpointing after every third position."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(CheckpointOnlyProvider())):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            yield f"checkpoint-only {element} {cur}"
            if cur % 3 == 2:
                restriction_tracker.defer_remainder()
                return
            cur += 1


class UnfinishedDoFn(beam.DoFn):
    """Claims one position and returns: check_done fails."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(HalvingProvider())):
        cur = restriction_tracker.current_restriction().start
        while restriction_tracker.try_claim(cur):
            yield element[cur]
            return


class UnboundedDoFn(beam.DoFn):
    """A DoFn whose work per element may never end (outputs nothing)."""

    @beam.DoFn.unbounded_per_element()
    def process(self, element):
        pass


class BoundedDoFn(beam.DoFn):
    """A plain DoFn (outputs nothing)."""

    def process(self, element):
        pass


class OffsetRangeProvider(RestrictionProvider):
    """Element x: [0, x), over a bounded or an unbounded tracker."""

    def __init__(self, use_bounded_offset_range):
        self.use_bounded_offset_range = use_bounded_offset_range

    def initial_restriction(self, element):
        return OffsetRange(0, element)

    def create_tracker(self, restriction):
        if self.use_bounded_offset_range:
            return OffsetRestrictionTracker(restriction)

        class UnboundedOffsetRestrictionTracker(OffsetRestrictionTracker):
            def is_bounded(self):
                return False

        return UnboundedOffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class OffsetRangeProviderWithTruncate(OffsetRangeProvider):
    """Keeps the first half when truncated."""

    def __init__(self):
        super().__init__(True)

    def truncate(self, element, restriction):
        return OffsetRange(restriction.start, restriction.stop // 2)


class FmtWindowed(beam.DoFn):
    """'<label> <window start> <key> <sorted values>'."""

    def __init__(self, label):
        self.label = label

    def process(self, kv, w=beam.DoFn.WindowParam):
        yield f"{self.label} {int(w.start)} {kv[0]} {sorted(kv[1])}"


def _fails(options, what):
    """Whether a pipeline running `what` (a function of the pipeline) fails."""
    try:
        with beam.Pipeline(options=options) as p:
            what(p)
    except Exception:   # the runner's error for an unfinished restriction
        return "failed"
    return "succeeded"


def _plain_lines(options):
    """truncate, unbounded_per_element and an unfinished restriction."""
    out = []
    for name, provider in [("bounded", OffsetRangeProvider(True)),
                           ("unbounded", OffsetRangeProvider(False)),
                           ("with-truncate", OffsetRangeProviderWithTruncate())]:
        r = provider.initial_restriction(10)
        out.append(f"truncate {name} {provider.truncate(10, r)!r}")
    p = beam.Pipeline(options=PipelineOptions([]))
    source = p | beam.Impulse()
    out.append(f"unbounded_per_element is_bounded="
               f"{(source | beam.ParDo(UnboundedDoFn())).is_bounded} plain is_bounded="
               f"{(source | beam.ParDo(BoundedDoFn())).is_bounded}")
    unfinished = _fails(options, lambda q: q | beam.Create(["abc", "defghijklmno"])
                        | beam.ParDo(UnfinishedDoFn()))
    out.append(f"check_done on an unfinished restriction: the pipeline {unfinished}")
    return out


def _windowed_expand(p):
    """ExpandStrings over ('A'|'B', t) at t in sliding windows of 10 s every 5 s."""
    return (p | "Times" >> beam.Create([1, 3, 5, 10])
            | "Stamp" >> beam.FlatMap(lambda t: [window.TimestampedValue(("A", t), t),
                                                 window.TimestampedValue(("B", t), t)])
            | "Sliding" >> beam.WindowInto(window.SlidingWindows(10, 5),
                                           accumulation_mode=trigger.AccumulationMode.DISCARDING)
            | "ExpandWindows" >> beam.ParDo(ExpandStrings(record_window=True), [], [], [])
            | "ExpandGlobal" >> beam.WindowInto(window.GlobalWindows()))


def build(p, inputs):
    """The SDFs of Beam's SDF tests; lines tagged with the test they follow."""
    files = [os.path.join(inputs, "sdf_beam_tests", f"records-{n}.txt") for n in _LINE_COUNTS]
    outs = []
    for label, names, resume in [("one", files[:1], None), ("all", files, None),
                                 ("one-resume", files[:1], 10), ("all-resume", files, 10)]:
        outs.append(p | f"Files {label}" >> beam.Create(names)
                    | f"ReadFiles {label}" >> beam.ParDo(ReadFiles(resume))
                    | f"Fmt {label}" >> beam.Map(lambda b, t=label: f"read {t} {b.decode()}"))
    outs.append(_windowed_expand(p) | "FmtWindows" >> beam.Map(lambda s: f"windows {s}"))
    outs.append(p | "Letters" >> beam.Create(["a", "b", "c"])
                | "ExpandSides" >> beam.ParDo(ExpandStrings(), ["1", "2"], ["3", "4"], "5")
                | "FmtSides" >> beam.Map(lambda s: f"extra-args {s}"))
    data = p | "Data" >> beam.Create(["abc", "defghijklmno", "pqrstuv", "wxyz"])
    for label, fn in [("expand", ExpandingStringsDoFn()),
                      ("self-provider", SelfProvidingExpandingStringsDoFn()),
                      ("checkpointing", CheckpointingExpandStringsDoFn())]:
        outs.append(data | label >> beam.ParDo(fn)
                    | f"Fmt {label}" >> beam.Map(lambda s, t=label: f"{t} {s}"))
    for label, fn in [("manual-watermark", WatermarkTrackingDoFn()),
                      ("own-estimator", OwnEstimatorDoFn())]:
        outs.append(data | label >> beam.ParDo(fn)
                    | f"Window {label}" >> beam.WindowInto(window.FixedWindows(4))
                    | f"Key {label}" >> beam.Map(lambda s: (s[0], s))
                    | f"Group {label}" >> beam.GroupByKey()
                    | f"Fmt {label}" >> beam.ParDo(FmtWindowed(label))
                    | f"Global {label}" >> beam.WindowInto(window.GlobalWindows()))
    batches = p | "Counts" >> beam.Create([1, 2, 3, 7, 0]) | "Enumerate" >> beam.ParDo(EnumerateSdf())
    outs.append(batches | "Flat" >> beam.FlatMap(lambda b: [f"enumerate {e} {k}" for e, k in b]))
    outs.append(batches | "Claimed" >> beam.Map(len) | "Total" >> beam.CombineGlobally(sum)
                | "FmtTotal" >> beam.Map(lambda n: f"enumerate claimed {n} in all"))
    outs.append(p | "Counts2" >> beam.Create([4, 9]) | "CheckpointOnly"
                >> beam.ParDo(EveryThirdCheckpoint()))
    outs.append(p | "Plain" >> beam.Create(_plain_lines(p.options)))
    return outs | "All" >> beam.Flatten()
