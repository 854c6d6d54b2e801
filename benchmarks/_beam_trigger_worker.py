"""Runs the trigger transcript corpus on Apache Beam Python's GeneralTriggerDriver.

    BEAM_PYTHON benchmarks/_beam_trigger_worker.py CORPUS_DIR MODE

Run by benchmarks/trigger_diff.py in Beam's virtualenv; prints one JSON document: per
transcript, either {"name", "status": "ran", "observed": [...]} (observed steps as in
tests/transcripts/_format.py: panes per action, drops and state unknown) or
{"name", "status": "n/a", "reason"} when the transcript uses something Beam Python lacks
(retractions, AtPeriod, Done, on-time / closing behaviours other than Beam's).

The driver is exercised as Beam's own TriggerDriverTranscriptTest does (trigger_test.py), plus
processing time: a TestClock gives each input its arrival time, and processing-time timers
fire when the clock reaches them. MODE chooses the output watermark passed to the driver:

* ``driver``: the input watermark (what TriggerDriverTranscriptTest passes);
* ``held``: the input watermark held back by the key's watermark holds
  (``InMemoryUnmergedState.get_earliest_hold()``), as Beam's DirectRunner computes it.
"""

from __future__ import annotations

import json
import os
import sys

import apache_beam.transforms.trigger as T
from apache_beam.runners.direct.clock import TestClock
from apache_beam.transforms import window as W
from apache_beam.transforms.core import Windowing
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.utils.timestamp import MAX_TIMESTAMP, MIN_TIMESTAMP, Timestamp
from apache_beam.utils.windowed_value import PaneInfoTiming, WindowedValue

WINDOW_FNS = {"FixedWindows": W.FixedWindows, "SlidingWindows": W.SlidingWindows,
              "Sessions": W.Sessions, "GlobalWindows": W.GlobalWindows}
TRIGGERS = {
    "AfterWatermark": T.AfterWatermark, "AfterCount": T.AfterCount,
    "AfterProcessingTime": T.AfterProcessingTime, "AfterAny": T.AfterAny, "AfterAll": T.AfterAll,
    "AfterEach": T.AfterEach, "Repeatedly": T.Repeatedly, "OrFinally": T.OrFinally,
    "Always": T.Always, "Never": T._Never, "DefaultTrigger": T.DefaultTrigger,
    "Default": T.DefaultTrigger,
    # the spec's and the paper's names, as Beam spells them
    "ElemCount": T.AfterCount, "AtCount": T.AfterCount, "EndOfWindow": lambda: T.AfterWatermark(),
    "AtWatermark": lambda: T.AfterWatermark(),
    "SinceEarliestElem": T.AfterProcessingTime, "AfterFirst": T.AfterAny, "Repeat": T.Repeatedly,
    "SequenceOf": T.AfterEach, "RepeatUntil": lambda t, u: T.OrFinally(T.Repeatedly(t), u),
}
UNSUPPORTED = {"AtPeriod": "no AtPeriod", "Done": "no Done(...)"}
TIMINGS = {PaneInfoTiming.EARLY: "EARLY", PaneInfoTiming.ON_TIME: "ON_TIME",
           PaneInfoTiming.LATE: "LATE"}


def unsupported(spec, fmt):
    """Why Beam Python cannot run `spec`, or None."""
    if spec["accumulation_mode"].upper() == "ACCUMULATING_AND_RETRACTING":
        return "no retractions"
    if spec.get("on_time_behavior", "FIRE_ALWAYS") != "FIRE_ALWAYS":
        return "no OnTimeBehavior"
    if spec.get("closing_behavior", "FIRE_IF_NON_EMPTY") != "FIRE_IF_NON_EMPTY":
        return "no ClosingBehavior"
    for name in fmt.expr_names(spec["trigger_fn"]):
        if name in UNSUPPORTED:
            return UNSUPPORTED[name]
    return None


def beam_time(fmt, t):
    return MAX_TIMESTAMP if fmt.is_end_of_time(t) else Timestamp.of(t)


def run(spec, fmt, mode):
    window_fn = fmt.parse_expr(spec["window_fn"], WINDOW_FNS)
    trigger_fn = fmt.parse_expr(spec["trigger_fn"], TRIGGERS)
    mode_enum = getattr(T.AccumulationMode, spec["accumulation_mode"].upper())
    combiner = getattr(W.TimestampCombiner, spec.get("timestamp_combiner", "OUTPUT_AT_EOW"))
    clock = TestClock(Timestamp.of(0))
    driver = T.GeneralTriggerDriver(
        Windowing(window_fn, trigger_fn, mode_enum, combiner, spec["allowed_lateness"]), clock)
    state = T.InMemoryUnmergedState()
    combined = "combine_fn" in spec
    wm = MIN_TIMESTAMP

    def output_watermark():
        return wm if mode == "driver" else min(wm, state.get_earliest_hold())

    def norm(wv):
        (w,) = wv.windows
        info = wv.pane_info
        if isinstance(w, W.GlobalWindow):
            window = fmt.GLOBAL
            ts = (fmt.END_OF_GLOBAL_WINDOW if wv.timestamp == w.max_timestamp()
                  else int(wv.timestamp))
        else:
            window = [int(w.start), int(w.max_timestamp())]
            ts = int(wv.timestamp)
        values = list(wv.value)
        return fmt.pane(window, sum(values) if combined else values, ts, TIMINGS[info.timing],
                        info.index, info.nonspeculative_index, info.is_first, info.is_last,
                        combined=combined)

    def fire_timers(out):
        while True:
            due, _ = state.get_timers(clear=True, watermark=wm,
                                      processing_time=Timestamp.of(clock.time()))
            if not due:
                return
            due.sort(key=lambda d: (Timestamp.of(d[1][2]), d[1][1] != TimeDomain.WATERMARK))
            for window, (name, domain, ts, _tag) in due:
                for wv in driver.process_timer(window, name, domain, Timestamp.of(ts), state, wm):
                    out.append(norm(wv))

    observed = []
    for step in spec["transcript"]:
        (kind, arg), = step.items()
        if kind not in fmt.ACTIONS:
            continue
        out = []
        if kind == "input":
            bundle = []
            for value, t in fmt.input_elements(arg):
                ts = Timestamp.of(t)
                windows = window_fn.assign(W.WindowFn.AssignContext(ts, element=value))
                bundle.append(WindowedValue(value, ts, windows))
            out.extend(norm(wv) for wv in driver.process_elements(
                state, bundle, output_watermark(), wm))
        elif kind == "watermark":
            wm = beam_time(fmt, arg)
        else:
            clock._current_time = beam_time(fmt, arg)
        fire_timers(out)
        observed.append({"panes": out, "dropped": None, "state": None})
    return observed


def main():
    corpus_dir, mode = sys.argv[1], sys.argv[2]
    sys.path.insert(0, os.path.abspath(corpus_dir))
    import _format as fmt

    results = []
    for spec in fmt.load_corpus(corpus_dir):
        reason = unsupported(spec, fmt)
        if reason:
            results.append({"name": spec["name"], "status": "n/a", "reason": reason})
            continue
        try:
            results.append({"name": spec["name"], "status": "ran",
                            "observed": run(spec, fmt, mode)})
        except Exception as e:  # a crash in Beam is a result too
            results.append({"name": spec["name"], "status": "error",
                            "reason": f"{type(e).__name__}: {e}"})
    json.dump(results, sys.stdout)


if __name__ == "__main__":
    main()
