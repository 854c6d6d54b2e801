"""Beam's Splittable DoFn snippets (the programming guide's SDF section, Beam's snippets.py) as
running programs: FileToWordsFn over real files with its RestrictionProvider (no initial split;
64-byte initial splits with weighted sizes; the DoFn its own provider with a restriction coder of
its own), a user-initiated checkpoint (`defer_remainder(Duration)`) against a fake external
service that is empty or times out the first time a page is asked for, a custom
WatermarkEstimator with its own state class (checkpointing every 5 claims, the state carried to
the resumed part), and a bundle finalizer that an SDF waits for by checkpointing, as Beam's
runner tests do. `truncate` (called only when a streaming pipeline drains, which neither
DirectRunner does here) and `restriction_size` are checked as plain values, with the defaults
of `RestrictionProvider`.

The resume lines of the custom estimator (what state a part resumed from its own checkpoint
starts with) assume that the runner does not split the restrictions itself, as neither Beam's
DirectRunner nor headrace's runners do here (the local runner splits only under
`--sdf_test_split_probability`, the Spark batch runner only a straggler with a second of work
left): a runner's split hands the residual the estimator's state as it was at the split.

The snippets are written to run: they claim `current_restriction().start` (the snippets' own
`current_restriction.start()` and `restriction.end` are typos in Beam's source), advance past a
claimed record, and give `restriction_size`, which Beam's default does not provide. The word
counts do not depend on where a runner splits the files."""

import os
import random
import tempfile

from _sdk import (
    OffsetRange, OffsetRestrictionTracker, RestrictionProvider, Timestamp, WatermarkEstimator,
    WatermarkEstimatorProvider, beam, coders, window,
)

_WORDS = ("river flow bank weir sluice race gate mill wheel water head tail pond dam".split())
#: The files (name, lines); "expensiveRecords" weighs twice (SDF_GetSize), "optional" is dropped
#: by the truncate of SDF_Truncate.
_FILES = [("plain.txt", 12), ("expensiveRecords.txt", 9), ("optional-notes.txt", 5),
          ("empty.txt", 0), ("one-long-line.txt", 1)]
_SPLIT_SIZE = 64


def make_inputs(d):
    """Writes the text files the FileToWords programs read (the last without a final newline)."""
    rng = random.Random(32)
    sub = os.path.join(d, "sdf_snippets")
    os.makedirs(sub, exist_ok=True)
    for i, (name, n) in enumerate(_FILES):
        width = 60 if name.startswith("one-long") else 6
        lines = [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, width)))
                 for _ in range(n)]
        end = "" if i == len(_FILES) - 1 else "\n"
        with open(os.path.join(sub, name), "w", encoding="utf-8", newline="") as fh:
            fh.write("\n".join(lines) + (end if lines else ""))


def _files(inputs):
    return [os.path.join(inputs, "sdf_snippets", name) for name, _ in _FILES]


def _read_lines(file_name, tracker):
    """The records (lines) starting in the tracker's range, each claimed at its first byte; a
    part that starts inside a line leaves that line to the part before it."""
    start = tracker.current_restriction().start
    with open(file_name, "rb") as fh:
        if start > 0:
            fh.seek(start - 1)
            fh.readline()   # the rest of the line the byte before us is in
        else:
            fh.seek(0)
        while tracker.try_claim(fh.tell()):   # fails at the range's stop (at the latest, EOF)
            yield fh.readline().decode("utf-8").rstrip("\n")


# ---- SDF_BasicExample ---------------------------------------------------------------------


class FileToWordsRestrictionProvider(RestrictionProvider):
    """A file's bytes; no initial split (the default `split`)."""

    def initial_restriction(self, file_name):
        return OffsetRange(0, os.stat(file_name).st_size)

    def create_tracker(self, restriction):
        return beam.io.restriction_trackers.OffsetRestrictionTracker(restriction)

    def restriction_size(self, file_name, restriction):
        return restriction.size()


class FileToWordsFn(beam.DoFn):
    """The words of a file, line by line."""

    def process(self, file_name,
                tracker=beam.DoFn.RestrictionParam(FileToWordsRestrictionProvider())):
        for line in _read_lines(file_name, tracker):
            for word in line.split():
                yield os.path.basename(file_name), word


# ---- SDF_BasicExampleWithSplitting, SDF_GetSize, SDF_Truncate -----------------------------


class SplittingFileToWordsProvider(FileToWordsRestrictionProvider):
    """64-byte initial parts; an expensiveRecords file's bytes weigh twice; drain skips an
    optional file."""

    def split(self, file_name, restriction):
        i = restriction.start
        while i < restriction.stop - _SPLIT_SIZE:
            yield OffsetRange(i, i + _SPLIT_SIZE)
            i += _SPLIT_SIZE
        yield OffsetRange(i, restriction.stop)

    def restriction_size(self, file_name, restriction):
        weight = 2 if "expensiveRecords" in file_name else 1
        return restriction.size() * weight

    def truncate(self, file_name, restriction):
        if "optional" in file_name:
            return None
        return restriction


class SplitFileToWordsFn(beam.DoFn):
    """FileToWordsFn over 64-byte initial parts."""

    def process(self, file_name,
                tracker=beam.DoFn.RestrictionParam(SplittingFileToWordsProvider())):
        for line in _read_lines(file_name, tracker):
            for word in line.split():
                yield os.path.basename(file_name), word


class OffsetRangeCoder(coders.Coder):
    """An OffsetRange as 'start:stop' in ASCII."""

    def encode(self, value):
        return f"{value.start}:{value.stop}".encode("ascii")

    def decode(self, encoded):
        start, stop = encoded.decode("ascii").split(":")
        return OffsetRange(int(start), int(stop))

    def is_deterministic(self):
        return True


class SelfProvidingFileToWordsFn(beam.DoFn, RestrictionProvider):
    """FileToWordsFn as its own RestrictionProvider (`RestrictionParam()`), giving the coder of
    its restrictions; initial parts of 64 bytes."""

    def initial_restriction(self, file_name):
        return OffsetRange(0, os.path.getsize(file_name))

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def split(self, file_name, restriction):
        return restriction.split(_SPLIT_SIZE)

    def restriction_size(self, file_name, restriction):
        return restriction.size()

    def restriction_coder(self):
        return OffsetRangeCoder()

    def process(self, file_name, tracker=beam.DoFn.RestrictionParam()):
        for line in _read_lines(file_name, tracker):
            for word in line.split():
                yield os.path.basename(file_name), word


# ---- SDF_UserInitiatedCheckpoint ------------------------------------------------------------


class FakeService:
    """A paged external service over a stream's records 0..n-1 (then an end record at n).
    The first time a page holding a position divisible by 7 is asked for it is empty (data not
    there yet); the first time one divisible by 11 is, the call times out. Remembered in files,
    so that every worker of one run sees the same service."""

    PAGE = 4

    def __init__(self, directory):
        self.directory = directory

    def _first_time(self, key):
        path = os.path.join(self.directory, key)
        if os.path.exists(path):
            return False
        with open(path, "w"):
            pass
        return True

    def fetch(self, stream, n, position):
        page = list(range(position, min(position + self.PAGE, n + 1)))
        if any(p % 11 == 0 and p < n for p in page) and \
                self._first_time(f"{stream}-timeout-{min(page)}"):
            raise TimeoutError(f"{stream} at {position}")
        if any(p % 7 == 0 and p < n for p in page) and \
                self._first_time(f"{stream}-empty-{min(page)}"):
            return []
        return [(p, f"{stream}#{p}" if p < n else None) for p in page]


class CountProvider(RestrictionProvider):
    """Element (name, n): the positions [0, n), no initial split (the polling stream's records,
    whose end record at position n fails its claim; the timed events)."""

    def initial_restriction(self, element):
        return OffsetRange(0, element[1])

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


class PollingFn(beam.DoFn):
    """Pulls records from the service; checkpoints for a while when it is empty or slow."""

    def __init__(self, directory):
        self.service = FakeService(directory)

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(CountProvider())):
        stream, n = element
        current_position = restriction_tracker.current_restriction().start
        while True:
            try:
                records = self.service.fetch(stream, n, current_position)
                if not records:
                    # a shorter delay when the service has nothing yet
                    restriction_tracker.defer_remainder(beam.utils.timestamp.Duration(seconds=0.02))
                    return
                for position, record in records:
                    if restriction_tracker.try_claim(position):
                        current_position = position + 1
                        yield record
                    else:
                        return
            except TimeoutError:
                # a longer one when it is throttling us
                restriction_tracker.defer_remainder(beam.utils.timestamp.Duration(seconds=0.05))
                return


# ---- SDF_CustomWatermarkEstimator -----------------------------------------------------------


class MyWatermarkEstimatorState:
    """What the estimator carries across a checkpoint: the element, where its restriction
    started and the latest timestamp observed (None before any). Never changed in place: a
    runner may keep the state it gave an estimator (to retry a bundle)."""

    def __init__(self, element, first, latest=None):
        self.element = element
        self.first = first
        self.latest = latest


class MyCustomWatermarkEstimator(WatermarkEstimator):
    """The watermark is the latest output timestamp observed (outputs come in time order)."""

    def __init__(self, estimator_state):
        self.state = estimator_state

    def observe_timestamp(self, timestamp):
        if self.state.latest is None or timestamp > self.state.latest:
            self.state = MyWatermarkEstimatorState(self.state.element, self.state.first, timestamp)

    def current_watermark(self):
        return self.state.latest

    def get_estimator_state(self):
        return self.state


class MyWatermarkEstimatorProvider(WatermarkEstimatorProvider):
    """Creates MyCustomWatermarkEstimator."""

    def initial_estimator_state(self, element, restriction):
        return MyWatermarkEstimatorState(element, restriction.start)

    def create_watermark_estimator(self, estimator_state):
        return MyCustomWatermarkEstimator(estimator_state)


class TimedEventsFn(beam.DoFn):
    """Position p at event second 100 + 3p; checkpoints after each position 5k + 4, and says at
    each such resume what the carried estimator state holds."""

    def process(self, element,
                restriction_tracker=beam.DoFn.RestrictionParam(CountProvider()),
                watermark_estimator=beam.DoFn.WatermarkEstimatorParam(
                    MyWatermarkEstimatorProvider())):
        start = restriction_tracker.current_restriction().start
        position = start
        while restriction_tracker.try_claim(position):
            if position == start and start % 5 == 0:
                wm = watermark_estimator.current_watermark()
                yield window.TimestampedValue(
                    f"resume {element[0]} at {start}: watermark "
                    f"{None if wm is None else wm.micros // 10 ** 6} "
                    f"state of {watermark_estimator.get_estimator_state().element[0]}",
                    100 + 3 * position)
            yield window.TimestampedValue(element[0], 100 + 3 * position)
            if position % 5 == 4:
                restriction_tracker.defer_remainder()
                return
            position += 1


class WindowCount(beam.DoFn):
    """'<window> <element> <count>'."""

    def process(self, kv, w=beam.DoFn.WindowParam):
        yield f"custom-estimator [{w.start.micros // 10 ** 6}, {w.end.micros // 10 ** 6}) " \
              f"{kv[0]} {kv[1]}"


# ---- BundleFinalize with a splittable DoFn ---------------------------------------------------


_ATTEMPTS = 20


class CheckpointsProvider(RestrictionProvider):
    """Element name: up to 20 attempts, positions [0, 20)."""

    def initial_restriction(self, element):
        return OffsetRange(0, _ATTEMPTS)

    def create_tracker(self, restriction):
        return OffsetRestrictionTracker(restriction)

    def restriction_size(self, element, restriction):
        return restriction.size()


def _touch(path):
    with open(path, "w"):
        pass


class AwaitFinalizationFn(beam.DoFn):
    """Registers a callback that marks the element finalized, then checkpoints until a resumed
    part sees the mark: the runner finalized the bundle once it committed it. (Every part a
    runner splits off waits for the mark too, and says so: the lines are made distinct.)"""

    def __init__(self, directory):
        self.directory = directory

    def process(self, element,
                bundle_finalizer=beam.DoFn.BundleFinalizerParam,
                restriction_tracker=beam.DoFn.RestrictionParam(CheckpointsProvider())):
        mark = os.path.join(self.directory, f"finalized-{element}")
        position = restriction_tracker.current_restriction().start
        if not restriction_tracker.try_claim(position):
            return
        if os.path.exists(mark):
            yield f"finalize {element}: finalized before it resumed"
            restriction_tracker.try_claim(restriction_tracker.current_restriction().stop)
            return
        if position == _ATTEMPTS - 1:
            yield f"finalize {element}: never finalized"
            return
        bundle_finalizer.register(lambda: _touch(mark))
        restriction_tracker.defer_remainder()


# ---- plain values -----------------------------------------------------------------------------


class UnboundedOffsetRestrictionTracker(OffsetRestrictionTracker):
    """An offset tracker that says it is unbounded (as Beam's runner tests declare one)."""

    def is_bounded(self):
        return False


class UnboundedProvider(CountProvider):
    """CountProvider whose trackers say they are unbounded."""

    def create_tracker(self, restriction):
        return UnboundedOffsetRestrictionTracker(restriction)


def _plain_lines(files):
    """restriction_size, split, split_and_size and truncate of the providers, and the defaults
    of RestrictionProvider."""
    out = []
    splitting = SplittingFileToWordsProvider()
    for f in files:
        name = os.path.basename(f)
        r = splitting.initial_restriction(f)
        parts = list(splitting.split_and_size(f, r))
        out.append(f"plain {name} initial={r!r} split_and_size={parts!r}")
        out.append(f"plain {name} truncate={splitting.truncate(f, r)!r} "
                   f"default truncate={FileToWordsRestrictionProvider().truncate(f, r)!r}")
        self_providing = SelfProvidingFileToWordsFn()
        coder = self_providing.restriction_coder()
        out.append(f"plain {name} self split={list(self_providing.split(f, r))!r} "
                   f"coded={coder.decode(coder.encode(r))!r}")
    basic = FileToWordsRestrictionProvider()
    out.append(f"plain default split={list(basic.split('x', OffsetRange(3, 9)))!r}")
    out.append(f"plain unbounded default truncate="
               f"{UnboundedProvider().truncate(('x', 4), OffsetRange(0, 4))!r}")
    try:
        RestrictionProvider().restriction_size("x", OffsetRange(0, 4))
        out.append("plain default restriction_size: returned")
    except NotImplementedError:
        out.append("plain default restriction_size: NotImplementedError")
    est = MyWatermarkEstimatorProvider()
    e = est.create_watermark_estimator(est.initial_estimator_state(("a", 1), OffsetRange(2, 5)))
    before = e.current_watermark()
    e.observe_timestamp(Timestamp(7))
    e.observe_timestamp(Timestamp(5))
    out.append(f"plain custom estimator before={before} after={e.current_watermark()!r} "
               f"state first={e.get_estimator_state().first}")
    return out


def build(p, inputs):
    """The snippets' SDFs over the input files, a stream service, timed events and finalizers."""
    files = _files(inputs)
    # this run's service and finalizer marks (in the inputs, which beam_compat removes)
    scratch = tempfile.mkdtemp(prefix="scratch-", dir=os.path.join(inputs, "sdf_snippets"))
    names = p | "Files" >> beam.Create(files)
    words = [
        names | "Basic" >> beam.ParDo(FileToWordsFn())
        | "BasicTag" >> beam.Map(lambda kv: ("basic",) + kv),
        names | "Split" >> beam.ParDo(SplitFileToWordsFn())
        | "SplitTag" >> beam.Map(lambda kv: ("split",) + kv),
        names | "SelfProviding" >> beam.ParDo(SelfProvidingFileToWordsFn())
        | "SelfTag" >> beam.Map(lambda kv: ("self",) + kv),
    ]
    counted = (words | "Words" >> beam.Flatten()
               | "CountWords" >> beam.combiners.Count.PerElement()
               | "FmtWords" >> beam.MapTuple(lambda k, n: f"words {k[0]} {k[1]} {k[2]} {n}"))
    streams = (p | "Streams" >> beam.Create([("s1", 30), ("s2", 0), ("s3", 9), ("s4", 45)])
               | "Poll" >> beam.ParDo(PollingFn(scratch))
               | "FmtPoll" >> beam.Map(lambda r: f"checkpoint {r}"))
    timed = (p | "Timed" >> beam.Create([("a", 23), ("b", 5), ("c", 1)])
             | "TimedEvents" >> beam.ParDo(TimedEventsFn()))
    resumes = (timed | "Resumes" >> beam.Filter(lambda s: s.startswith("resume"))
               | "ResumesGlobal" >> beam.WindowInto(window.GlobalWindows()))
    per_window = (timed | "Events" >> beam.Filter(lambda s: not s.startswith("resume"))
                  | "Windows" >> beam.WindowInto(window.FixedWindows(10))
                  | "CountEvents" >> beam.combiners.Count.PerElement()
                  | "FmtEvents" >> beam.ParDo(WindowCount())
                  | "EventsGlobal" >> beam.WindowInto(window.GlobalWindows()))
    finalized = (p | "ToFinalize" >> beam.Create(["f1", "f2", "f3"])
                 | "AwaitFinalization" >> beam.ParDo(AwaitFinalizationFn(scratch))
                 | "OncePerElement" >> beam.Distinct())
    plain = p | "Plain" >> beam.Create(_plain_lines(files))
    return [counted, streams, resumes, per_window, finalized, plain] | "All" >> beam.Flatten()
