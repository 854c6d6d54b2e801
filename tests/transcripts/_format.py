"""The trigger transcript format: loading, validating, expression parsing, and checking.

Executor-agnostic and free of headrace imports, so that every executor (the per-key core,
the local runner, the Spark runners, and Apache Beam's own trigger machinery in
benchmarks/trigger_diff.py, which runs in Beam's virtualenv) shares one reading of a
transcript. An executor turns a transcript into *observed steps* (one per action, see
`ObservedStep`); `check(transcript, observed)` compares them with the expectations.

A transcript (one YAML document; files hold several, separated by ``---``)::

    name: fixed_default                    # unique across the corpus
    window_fn: FixedWindows(10)            # FixedWindows / SlidingWindows / Sessions / GlobalWindows
    trigger_fn: Default                    # a trigger expression; empty () may be omitted
    accumulation_mode: discarding          # discarding | accumulating | accumulating_and_retracting
    allowed_lateness: 100                  # seconds
    timestamp_combiner: OUTPUT_AT_EOW      # optional (OUTPUT_AT_EOW / _EARLIEST / _LATEST)
    on_time_behavior: FIRE_IF_NON_EMPTY    # optional (default FIRE_ALWAYS)
    closing_behavior: FIRE_ALWAYS          # optional (default FIRE_IF_NON_EMPTY)
    combine_fn: sum                        # optional: panes carry `value`, the sum, not `values`
    beam_deviation: 3                      # optional: Beam Python is known to differ here, by the
                                           # numbered deviation(s) of docs/semantics.md (an int or
                                           # a list); used by benchmarks/trigger_diff.py
    xfail: "why"                           # optional: a known headrace bug (strict xfail)
    transcript:
      - input: [1, 2, {value: a, timestamp: 3}]   # one bundle; a bare int t is value t at time t
      - watermark: 25                      # the input watermark advances to 25 (.inf: end of time)
      - processing_time: 5                 # processing time advances to 5 (it starts at 0)
      - expect:                            # every pane the last action produced, in any order
          - {window: [0, 9], values: [1, 2, 3], timestamp: 9, timing: ON_TIME, index: 0,
             nonspeculative_index: 0, is_first: true, is_last: false}
      - dropped: {late: 1, closed: 0}      # element-window pairs the last action dropped
      - state: empty                       # or {active: [[0, 9]], closed: [[10, 19]]}

Times are seconds. As in Beam's transcripts, a window [start, end) is written
``[start, max_timestamp]`` truncated to whole seconds (``[0, 9]`` is [0 s, 10 s)), the global
window is ``global``, and pane timestamps are truncated to whole seconds (an end-of-window
timestamp of [0, 10) is 9; of the global window, ``end_of_global_window``).

A pane lists every field: window, values (sorted) or value (with combine_fn), timestamp,
timing (EARLY / ON_TIME / LATE), index, nonspeculative_index, is_first, is_last; a retraction
adds ``retraction: true`` (it repeats the pane it withdraws). Output an action produced must be
matched by `expect` / `dropped` steps before the next action, or the transcript fails.
"""

from __future__ import annotations

import ast
import glob
import math
import os
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

HERE = os.path.dirname(os.path.abspath(__file__))

ACTIONS = ("input", "watermark", "processing_time")
ASSERTIONS = ("expect", "dropped", "state")
REQUIRED_KEYS = ("name", "window_fn", "trigger_fn", "accumulation_mode", "allowed_lateness",
                 "transcript")
OPTIONAL_KEYS = ("timestamp_combiner", "on_time_behavior", "closing_behavior", "combine_fn",
                 "beam_deviation", "xfail")
ACCUMULATION_MODES = ("DISCARDING", "ACCUMULATING", "ACCUMULATING_AND_RETRACTING")
TIMESTAMP_COMBINERS = ("OUTPUT_AT_EOW", "OUTPUT_AT_EARLIEST", "OUTPUT_AT_LATEST")
ON_TIME_BEHAVIORS = ("FIRE_ALWAYS", "FIRE_IF_NON_EMPTY")
CLOSING_BEHAVIORS = ("FIRE_ALWAYS", "FIRE_IF_NON_EMPTY")
COMBINE_FNS = ("sum",)
TIMINGS = ("EARLY", "ON_TIME", "LATE")
PANE_KEYS = ("window", "timestamp", "timing", "index", "nonspeculative_index", "is_first",
             "is_last")
GLOBAL = "global"
#: How many deviations of Beam Python docs/semantics.md numbers.
BEAM_DEVIATIONS = 11
#: Numbers that docs/semantics.md keeps but no longer counts as deviations (9: pane indices
#: after a merge, which turned out to be the same in Beam Python, Beam Java and headrace).
WITHDRAWN_DEVIATIONS = (9,)
END_OF_GLOBAL_WINDOW = "end_of_global_window"

#: Observed output of one action: the panes in emission order (normalised with `pane`), the
#: dropped element-window pairs ({'late': n, 'closed': m}, or None when the executor cannot
#: tell), and the key's state after the action ({'active': [...], 'closed': [...]}, or None).
ObservedStep = Dict[str, Any]


class TranscriptError(ValueError):
    """A transcript is malformed (unknown key, bad step, unparsable expression)."""


# ---- loading ------------------------------------------------------------------------------


def load_corpus(directory: str = HERE) -> List[Dict[str, Any]]:
    """Every transcript of every *.yaml file in `directory`, validated, in file order."""
    import yaml

    out: List[Dict[str, Any]] = []
    names: Dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        with open(path, encoding="utf-8") as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                validate(doc)
                if doc["name"] in names:
                    raise TranscriptError(
                        f"transcript name {doc['name']!r} appears in {names[doc['name']]} and "
                        f"{os.path.basename(path)}; names must be unique")
                names[doc["name"]] = os.path.basename(path)
                doc["file"] = os.path.basename(path)
                out.append(doc)
    return out


def validate(spec: Mapping[str, Any]) -> None:
    """Raises TranscriptError unless `spec` is a well-formed transcript."""
    name = spec.get("name", "<unnamed>")
    for k in REQUIRED_KEYS:
        if k not in spec:
            raise TranscriptError(f"{name}: missing required key {k!r}")
    for k in spec:
        if k not in REQUIRED_KEYS and k not in OPTIONAL_KEYS and k != "file":
            raise TranscriptError(f"{name}: unknown key {k!r}")
    _one_of(name, "accumulation_mode", spec["accumulation_mode"].upper(), ACCUMULATION_MODES)
    for key, allowed in (("timestamp_combiner", TIMESTAMP_COMBINERS),
                         ("on_time_behavior", ON_TIME_BEHAVIORS),
                         ("closing_behavior", CLOSING_BEHAVIORS), ("combine_fn", COMBINE_FNS)):
        if key in spec:
            _one_of(name, key, spec[key], allowed)
    devs = deviations(spec)
    if not all(isinstance(d, int) and 1 <= d <= BEAM_DEVIATIONS
               and d not in WITHDRAWN_DEVIATIONS for d in devs):
        raise TranscriptError(f"{name}: beam_deviation must be 1..{BEAM_DEVIATIONS} (not one of "
                              f"the withdrawn {WITHDRAWN_DEVIATIONS}) or a list of them")
    value_key = "value" if "combine_fn" in spec else "values"
    for i, step in enumerate(spec["transcript"]):
        if not isinstance(step, dict) or len(step) != 1:
            raise TranscriptError(f"{name}: step {i} must be a one-key mapping, got {step!r}")
        (kind, arg), = step.items()
        if kind == "input":
            input_elements(arg)
        elif kind in ("watermark", "processing_time"):
            seconds(arg)
        elif kind == "expect":
            for p in arg:
                keys = set(PANE_KEYS) | {value_key}
                extra = set(p) - keys - {"retraction"}
                missing = keys - set(p)
                if extra or missing:
                    raise TranscriptError(
                        f"{name}: step {i}: pane {p!r} must list exactly "
                        f"{sorted(keys)} (+ retraction); missing {sorted(missing)}, "
                        f"unknown {sorted(extra)}")
                _one_of(name, "timing", p["timing"], TIMINGS)
        elif kind == "dropped":
            if set(arg) != {"late", "closed"}:
                raise TranscriptError(f"{name}: step {i}: dropped needs late and closed counts")
        elif kind == "state":
            if arg != "empty" and (not isinstance(arg, dict) or set(arg) != {"active", "closed"}):
                raise TranscriptError(
                    f"{name}: step {i}: state must be 'empty' or {{active: [...], closed: [...]}}")
        else:
            raise TranscriptError(f"{name}: step {i}: unknown action {kind!r}")


def deviations(spec: Mapping[str, Any]) -> List[int]:
    """The Beam Python deviations (docs/semantics.md) a transcript is tagged with."""
    d = spec.get("beam_deviation", [])
    return list(d) if isinstance(d, list) else [d]


def _one_of(name: str, key: str, value: Any, allowed: Tuple[str, ...]) -> None:
    if value not in allowed:
        raise TranscriptError(f"{name}: {key} must be one of {', '.join(allowed)}, got {value!r}")


# ---- values -------------------------------------------------------------------------------


def seconds(value: Any) -> float:
    """A transcript time in seconds; .inf / -.inf stand for the end / beginning of time."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TranscriptError(f"a time must be a number of seconds or .inf, got {value!r}")
    return value


def is_end_of_time(value: Any) -> bool:
    """True for .inf (the watermark at the end of time)."""
    return isinstance(value, float) and math.isinf(value) and value > 0


def input_elements(arg: Any) -> List[Tuple[Any, Any]]:
    """The (value, timestamp) pairs of an `input` step (a bare int t is value t at time t)."""
    if not isinstance(arg, list):
        raise TranscriptError(f"input takes a list of elements, got {arg!r}")
    out = []
    for e in arg:
        if isinstance(e, dict):
            if set(e) != {"value", "timestamp"}:
                raise TranscriptError(f"an input element is t or {{value: v, timestamp: t}}, got {e!r}")
            out.append((e["value"], seconds(e["timestamp"])))
        elif isinstance(e, int) and not isinstance(e, bool):
            out.append((e, e))
        else:
            raise TranscriptError(f"an input element is t or {{value: v, timestamp: t}}, got {e!r}")
    return out


# ---- expressions --------------------------------------------------------------------------


def parse_expr(text: str, names: Mapping[str, Callable[..., Any]]) -> Any:
    """Builds `Foo(1, bar=Baz(2))` from `names`, never evaluating code.

    Only calls of known names, bare known names (called with no arguments, as Beam's
    transcripts allow: `Default`, `GlobalWindows`), keyword arguments and numbers are accepted.
    """
    try:
        tree = ast.parse(str(text).strip(), mode="eval")
    except SyntaxError as e:
        raise TranscriptError(f"cannot parse {text!r}: {e.msg}") from None
    return _build(tree.body, names, text)


def _build(node: ast.AST, names: Mapping[str, Callable[..., Any]], text: str) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
            and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _build(node.operand, names, text)
        if isinstance(v, (int, float)):
            return -v
    if isinstance(node, ast.Name):
        return _lookup(node.id, names, text)()
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        fn = _lookup(node.func.id, names, text)
        args = [_build(a, names, text) for a in node.args]
        kwargs = {k.arg: _build(k.value, names, text) for k in node.keywords if k.arg}
        if len(kwargs) != len(node.keywords):
            raise TranscriptError(f"{text!r}: **kwargs are not allowed")
        return fn(*args, **kwargs)
    raise TranscriptError(f"{text!r}: only calls of known names and numbers are allowed, "
                          f"found {ast.dump(node)}")


def _lookup(name: str, names: Mapping[str, Callable[..., Any]], text: str) -> Callable[..., Any]:
    if name not in names:
        raise TranscriptError(f"{text!r}: unknown name {name!r}; known: {', '.join(sorted(names))}")
    return names[name]


def expr_names(text: str) -> List[str]:
    """The names called in an expression (to ask whether an executor supports them all)."""
    tree = ast.parse(str(text).strip(), mode="eval")
    return sorted({n.id for n in ast.walk(tree) if isinstance(n, ast.Name)})


# ---- panes --------------------------------------------------------------------------------


def pane(window: Any, value: Any, timestamp: Any, timing: str, index: int,
         nonspeculative_index: int, is_first: bool, is_last: bool, retraction: bool = False,
         combined: bool = False) -> Dict[str, Any]:
    """A normalised pane: window as [start, max_timestamp] seconds or 'global', values sorted."""
    p: Dict[str, Any] = {
        "window": window, "timestamp": timestamp, "timing": timing, "index": index,
        "nonspeculative_index": nonspeculative_index, "is_first": bool(is_first),
        "is_last": bool(is_last),
    }
    if combined:
        p["value"] = value
    else:
        p["values"] = sorted(value, key=_sort_key)
    if retraction:
        p["retraction"] = True
    return p


def _sort_key(v: Any) -> Tuple[str, Any]:
    return (type(v).__name__, v)


def _canonical(p: Mapping[str, Any]) -> Tuple:
    q = dict(p)
    q.setdefault("retraction", False)
    if "values" in q:
        q["values"] = tuple(sorted(q["values"], key=_sort_key))
    q["window"] = tuple(q["window"]) if isinstance(q["window"], list) else q["window"]
    return tuple(sorted((k, repr(v)) for k, v in q.items()))


def format_pane(p: Mapping[str, Any]) -> str:
    """One pane on one line, in transcript syntax."""
    vals = f"value: {p['value']!r}" if "value" in p else f"values: {p['values']!r}"
    window = p["window"] if isinstance(p["window"], str) else list(p["window"])
    r = ", retraction: true" if p.get("retraction") else ""
    return (f"{{window: {window}, {vals}, timestamp: {p['timestamp']}, timing: {p['timing']}, "
            f"index: {p['index']}, nonspeculative_index: {p['nonspeculative_index']}, "
            f"is_first: {str(p['is_first']).lower()}, is_last: {str(p['is_last']).lower()}{r}}}")


def _normal_window(w: Any) -> Any:
    return w if isinstance(w, str) else list(w)


def _normal_state(s: Any) -> Dict[str, List]:
    if s == "empty":
        return {"active": [], "closed": []}
    return {k: sorted(_normal_window(w) for w in s[k]) for k in ("active", "closed")}


# ---- checking -----------------------------------------------------------------------------


def check(spec: Mapping[str, Any], observed: List[ObservedStep]) -> List[str]:
    """The ways `observed` departs from the transcript's expectations (empty: it matches)."""
    errors: List[str] = []
    pending: List[Dict[str, Any]] = []
    drops: Optional[Dict[str, int]] = None
    state: Optional[Dict[str, List]] = None
    last = "the start"
    n = 0

    def leftover(before: str) -> None:
        if pending:
            errors.append(f"unexpected output after {last} (before {before}): "
                          + "; ".join(format_pane(p) for p in pending))
        if drops and any(drops.values()):
            errors.append(f"unexpected drops after {last} (before {before}): {drops}")

    for i, step in enumerate(spec["transcript"]):
        (kind, arg), = step.items()
        if kind in ACTIONS:
            leftover(f"step {i} {kind}: {arg!r}")
            if n >= len(observed):
                errors.append(f"the executor stopped before step {i} ({kind})")
                return errors
            obs = observed[n]
            n += 1
            pending = list(obs["panes"])
            drops = dict(obs["dropped"]) if obs.get("dropped") is not None else None
            state = obs.get("state")
            last = f"step {i} ({kind}: {arg!r})"
        elif kind == "expect":
            for p in arg:
                want = _canonical(p)
                for j, got in enumerate(pending):
                    if _canonical(got) == want:
                        del pending[j]
                        break
                else:
                    errors.append(f"after {last}: expected pane not produced: {format_pane(p)}; "
                                  f"unmatched output: "
                                  + ("; ".join(format_pane(q) for q in pending) or "none"))
        elif kind == "dropped":
            if drops is not None:
                if drops != {"late": arg["late"], "closed": arg["closed"]}:
                    errors.append(f"after {last}: dropped {drops}, expected {dict(arg)}")
                drops = {"late": 0, "closed": 0}
        elif kind == "state":
            if state is not None and state != _normal_state(arg):
                errors.append(f"after {last}: state {state}, expected {_normal_state(arg)}")
    leftover("the end")
    return errors


def check_or_fail(spec: Mapping[str, Any], observed: List[ObservedStep]) -> None:
    """Raises AssertionError listing every departure from the transcript."""
    errors = check(spec, observed)
    if errors:
        raise AssertionError(f"transcript {spec['name']} ({spec.get('file', '?')}):\n  "
                             + "\n  ".join(errors))


def expected_steps(spec: Mapping[str, Any]) -> List[Tuple[str, List[Dict[str, Any]]]]:
    """Per action of the transcript: its description and the panes the transcript expects of it."""
    out: List[Tuple[str, List[Dict[str, Any]]]] = []
    for i, step in enumerate(spec["transcript"]):
        (kind, arg), = step.items()
        if kind in ACTIONS:
            out.append((f"step {i} {kind}: {arg!r}", []))
        elif kind == "expect" and out:
            out[-1][1].extend(arg)
    return out


def same_panes(a: List[Mapping[str, Any]], b: List[Mapping[str, Any]]) -> bool:
    """True when two pane lists hold the same panes, in any order."""
    return sorted(map(_canonical, a)) == sorted(map(_canonical, b))
