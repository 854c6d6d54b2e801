"""The model's value types and extension points (docs/design/value-types-and-hooks.md).

Windowing is a frozen dataclass; windows and PaneInfo are hand-written __slots__ classes
(measured: a frozen dataclass costs their per-element constructors) whose equality, hash,
repr and pickling are checked here. The hooks that must be overridden are abstract base
classes: a subclass missing one cannot be instantiated, and the optional ones keep defaults.
"""

from __future__ import annotations

import dataclasses
import pickle

import cloudpickle
import pytest

from headrace.io.filebasedsink import FileBasedSink, FileFormatWriter
from headrace.io.iobase import BoundedSource
from headrace.model.coders import Coder
from headrace.model.combine import CombineFn
from headrace.model.triggers.algebra import LeafTrigger, TriggerFn
from headrace.model.window import (
    GLOBAL_WINDOW, BoundedWindow, FixedWindows, GlobalWindow, GlobalWindows, IntervalWindow,
    NonMergingWindowFn, Sessions, WindowFn,
)
from headrace.model.strategy import TimestampCombiner, Windowing
from headrace.model.windowed import PANE_INFO_UNKNOWN, PaneInfo, PaneInfoTiming
from headrace.pipeline.dofn import DoFn
from headrace.transforms.trigger import AccumulationMode, AfterCount, Repeatedly


# ---- Windowing: a frozen dataclass ------------------------------------------------------


def test_windowing_is_a_frozen_dataclass():
    w = Windowing(FixedWindows(60), Repeatedly(AfterCount(2)),
                  AccumulationMode.ACCUMULATING, TimestampCombiner.OUTPUT_AT_LATEST, 30)
    assert dataclasses.is_dataclass(w)
    assert not hasattr(w, "__dict__")
    for name in ("windowfn", "trigger", "accumulation_mode", "timestamp_combiner",
                 "allowed_lateness_us", "closing_behavior", "on_time_behavior"):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(w, name, getattr(w, name))
    assert w.allowed_lateness_us == 30_000_000 and not w.is_default()


def test_windowing_keeps_identity_equality_repr_and_pickles():
    w = Windowing(GlobalWindows())
    assert w.is_default()
    assert w == w and w != Windowing(GlobalWindows())
    assert hash(w) == object.__hash__(w)
    assert repr(w) == ("Windowing(GlobalWindows(), trigger=DefaultTrigger(), "
                       "accumulation_mode=<AccumulationMode.DISCARDING: 1>, "
                       "timestamp_combiner=OUTPUT_AT_EOW, allowed_lateness=0s)")
    for dumps in (pickle.dumps, cloudpickle.dumps):
        back = pickle.loads(dumps(Windowing(Sessions(10), allowed_lateness=5)))
        assert (back.windowfn, back.allowed_lateness_us) == (Sessions(10), 5_000_000)
        assert not back.is_default()


# ---- windows and panes: hand-written __slots__ value classes -----------------------------


def test_windows_equality_hash_repr_and_pickling():
    w = IntervalWindow(10, 20)
    assert w == IntervalWindow._of(10_000_000, 20_000_000) and hash(w) == hash((10_000_000, 20_000_000))
    assert repr(w) == "[10.0, 20.0)" and repr(BoundedWindow(10)) == "[?, 10.0)"
    assert not hasattr(w, "__dict__") and not hasattr(GLOBAL_WINDOW, "__dict__")
    assert pickle.loads(pickle.dumps(w)) == w
    assert pickle.loads(pickle.dumps(GLOBAL_WINDOW)) is GLOBAL_WINDOW is GlobalWindow()
    assert {w: 1}[IntervalWindow(10, 20)] == 1


def test_pane_info_equality_hash_repr_and_pickling():
    p = PaneInfo(True, False, 0, 0, -1)
    assert p.timing is PaneInfoTiming.EARLY
    assert p == PaneInfo(True, False, PaneInfoTiming.EARLY, 0, -1) and p != PANE_INFO_UNKNOWN
    assert hash(p) == hash((True, False, 0, 0, -1))
    assert repr(p) == "PaneInfo(first: True, last: False, timing: EARLY, index: 0, nonspeculative_index: -1)"
    assert pickle.loads(pickle.dumps(p)) == p and not hasattr(p, "__dict__")


# ---- hooks: abstract where they must be overridden -----------------------------------------


def test_a_leaf_trigger_without_is_ready_cannot_be_instantiated():
    class NoPredicate(LeafTrigger):
        pass

    class Ready(LeafTrigger):
        def is_ready(self, data, ctx):
            return True

    with pytest.raises(TypeError, match="is_ready"):
        NoPredicate()
    assert Ready().ready(Ready().initial_state(), None)
    assert {"initial_state", "ready", "next", "further"} <= TriggerFn.__abstractmethods__


def test_window_fn_needs_assign_but_not_merge():
    class NoAssign(WindowFn):
        def is_merging(self):
            return False

    class AssignOnly(WindowFn):  # non-merging without NonMergingWindowFn: merge is optional
        def assign(self, context):
            return [GLOBAL_WINDOW]

        def is_merging(self):
            return False

    class Parity(NonMergingWindowFn):
        def assign(self, context):
            return [GLOBAL_WINDOW]

    with pytest.raises(TypeError, match="assign"):
        NoAssign()
    assert AssignOnly()._assign(None, 0, (GLOBAL_WINDOW,)) == (GLOBAL_WINDOW,)
    assert not Parity().is_merging() and Parity().get_window_coder() is None


def test_combine_fn_needs_its_four_methods_and_retraction_stays_optional():
    class Partial(CombineFn):
        def create_accumulator(self):
            return 0

        def add_input(self, acc, x):
            return acc + x

    class Sum(Partial):
        def merge_accumulators(self, accs):
            return sum(accs)

        def extract_output(self, acc):
            return acc

    with pytest.raises(TypeError, match="extract_output"):
        Partial()
    assert Sum().apply([1, 2, 3]) == 6 and not Sum().can_retract()


def test_sources_and_file_formats_are_abstract_coders_and_dofns_are_not():
    class SplitOnly(BoundedSource):
        def split(self, desired_parallelism):
            return [None]

    with pytest.raises(TypeError, match="read"):
        SplitOnly()
    with pytest.raises(TypeError, match="write"):
        FileFormatWriter(None)
    assert "new_writer" in FileBasedSink.__abstractmethods__

    class EncodeOnly(Coder):  # a coder used only for writing need not decode
        def encode(self, value):
            return str(value).encode()

    assert EncodeOnly().encode(1) == b"1"
    assert DoFn().default_label() == "DoFn"  # Beam's DoFn is a plain base class


def test_interval_windows_pickle_through_a_module_function_and_old_pickles_still_load():
    w = IntervalWindow._of(10_000_000, 70_000_000)
    # the function's reference is written once per pickle, however many windows it holds
    data = pickle.dumps([w, IntervalWindow._of(1, 2)], pickle.HIGHEST_PROTOCOL)
    assert data.count(b"_interval_window") == 1
    back = pickle.loads(pickle.dumps([w, w]))
    assert back == [w, w] and hash(back[0]) == hash(w)
    # a checkpoint written before pickles windows as IntervalWindow._of(start, end)
    legacy = pickle.dumps(_Legacy(10_000_000, 70_000_000))
    assert pickle.loads(legacy) == w


class _Legacy:
    """Pickles as an IntervalWindow did before (through the bound classmethod `_of`)."""

    def __init__(self, start_us, end_us):
        self.bounds = (start_us, end_us)

    def __reduce__(self):
        return (IntervalWindow._of, self.bounds)


def _window_state_fields(ws):
    from headrace.model.reduce import WindowState
    return tuple(getattr(ws, s) for s in WindowState.__slots__)


def test_a_window_state_pickles_whole_and_its_older_pickles_load():
    # the per-key core's state of one window is pickled at every visit of a streaming grouping
    # (a module-level function of its fields); checkpoints hold pickles of the earlier form
    # (the class, then __setstate__ with the fields), which must still load
    import copy

    from headrace.model.reduce import WindowState
    from headrace.model.windowed import PaneInfoTiming

    ws = WindowState([1, 2], (False, 3))
    ws.pending, ws.hold_us, ws.eow_timer, ws.pane_index, ws.nonspec_index = 2, 99, True, 4, 1
    ws.last_timing, ws.to_retract, ws.unmatched = PaneInfoTiming.LATE, ["pane"], [7]
    fields = _window_state_fields(ws)
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        back = pickle.loads(pickle.dumps(ws, protocol))
        assert type(back) is WindowState and _window_state_fields(back) == fields
    assert _window_state_fields(copy.deepcopy(ws)) == fields

    # the earlier form, as protocol 2 wrote it: the class, NEWOBJ, the field tuple, BUILD
    state = pickle.dumps(fields, 2)[2:-1]   # without its PROTO and STOP opcodes
    earlier = b"\x80\x02cheadrace.model.reduce\nWindowState\n)\x81" + state + b"b."
    old = pickle.loads(earlier)
    assert type(old) is WindowState and _window_state_fields(old) == fields
