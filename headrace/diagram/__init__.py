"""Pane diagrams: the Dataflow Model paper's figures, drawn from a run's pane recording.

A run with `--record_panes=DIR` records what each grouping step's per-key core saw and did
(`headrace.diagram.recording`). `draw(DIR, step, key)` draws it for one key the way the
paper's figures do: event time across, processing time up; each input element a dot where it
arrived, labelled with its value; the step's input watermark as a line; each window a column;
each pane a box over its window, reaching up to the processing time it fired at, labelled with
its value and marked EARLY / ON_TIME / LATE (a retraction dashed, with a minus sign); each
element dropped as late a red cross. It returns a matplotlib `Figure` (shown inline in
Jupyter) and, given `output`, writes it as SVG, PNG or a one-file HTML page (where hovering
over an element, a pane or a dropped element shows what it is).

    headrace diagram DIR --step Sum [--key k] [-o sums.svg]

Needs matplotlib (`pip install 'headrace[diagrams]'`).
"""

from __future__ import annotations

import html
import io
import os
from collections import Counter
from typing import Any, Dict, List, Optional, Tuple

from headrace.errors import InvalidArgumentError
from headrace.diagram.recording import read_panes, recorded_steps, safe_name

__all__ = ["draw", "panes_of", "svg_text"]

_FAR = 10**15          # a watermark beyond this is the end of input (+infinity): not drawn
_TIMING_COLORS = {"EARLY": "#4c9be8", "ON_TIME": "#3aa357", "LATE": "#e8a13c", "UNKNOWN": "#999999"}


def panes_of(directory: str, step: str, key: Optional[str] = None) -> Dict[str, Any]:
    """The recording of one key of step `step` under `directory`, as lists of row dicts by kind
    ("element", "watermark", "pane", "dropped") plus "key"; the key with the most recorded
    elements when `key` is None."""
    table = read_panes(directory, step)
    rows = table.to_pylist()
    keys = Counter(r["key"] for r in rows if r["kind"] == "element")
    if key is None:
        if not keys:
            raise InvalidArgumentError(f"step {step!r} recorded no element in {directory!r}")
        key = keys.most_common(1)[0][0]
    elif str(key) not in keys and not any(r["key"] == str(key) for r in rows):
        raise InvalidArgumentError(
            f"key {key!r} is not in step {step!r}'s recording; recorded keys: "
            f"{', '.join(sorted(keys)[:20])}{' ...' if len(keys) > 20 else ''}")
    key = str(key)
    out: Dict[str, Any] = {"key": key}
    for kind in ("element", "pane", "dropped"):
        out[kind] = [r for r in rows if r["kind"] == kind and r["key"] == key]
    marks: Dict[int, int] = {}
    for r in rows:   # the step's watermark: the furthest any core was told by each processing time
        if r["kind"] == "watermark":
            marks[r["processing_time_us"]] = max(marks.get(r["processing_time_us"], r["watermark_us"]),
                                                 r["watermark_us"])
    running = None
    out["watermark"] = []
    for pt in sorted(marks):
        running = marks[pt] if running is None else max(running, marks[pt])
        out["watermark"].append({"processing_time_us": pt, "watermark_us": running})
    return out


def _seconds(us: int) -> float:
    return us / 1e6


def draw(directory: str, step: str, key: Optional[str] = None, output: Optional[str] = None,
         title: Optional[str] = None) -> Any:
    """Draws the pane diagram of one key of step `step` (see the module doc); writes it to
    `output` when given (.svg, .png or .html); returns the matplotlib Figure."""
    return _draw(panes_of(directory, step, key), step, output, title)


def _draw(data: Dict[str, Any], step: str, output: Optional[str], title: Optional[str]) -> Any:
    """The diagram of one key's recording (`panes_of`), written to `output` when given."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.patches import Rectangle
    except ImportError as exc:
        raise InvalidArgumentError("pane diagrams need matplotlib: pip install 'headrace[diagrams]'") from exc
    fig = Figure(figsize=(8, 6), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    ax.set_xlabel("event time (s)")
    ax.set_ylabel("processing time (s)")
    ax.set_title(title or f"{step}, key {data['key']}")
    xs: List[float] = []
    ys: List[float] = [0.0]
    # windows as columns, panes as boxes up to the processing time they fired at
    windows = sorted({(p["window_start_us"], p["window_end_us"]) for p in data["pane"]
                      if p["window_end_us"] < _FAR})
    for start, end in windows:
        ax.axvspan(_seconds(start), _seconds(end), color="#f2f2f2", zorder=0)
        xs += [_seconds(start), _seconds(end)]
    fired_before: Dict[Tuple[int, int], float] = {}
    for p in sorted(data["pane"], key=lambda r: (r["processing_time_us"], r["pane_index"] or 0)):
        start, end = p["window_start_us"], p["window_end_us"]
        if end >= _FAR:   # the global window: as wide as the data
            start, end = _data_span(data)
        top = _seconds(p["processing_time_us"])
        bottom = fired_before.get((p["window_start_us"], p["window_end_us"]), 0.0)
        color = _TIMING_COLORS.get(p["timing"] or "UNKNOWN", "#999999")
        box = ax.add_patch(Rectangle((_seconds(start), bottom), _seconds(end) - _seconds(start),
                                     max(top - bottom, 0.0), facecolor=color, alpha=0.25,
                                     edgecolor=color, linestyle="--" if p["retraction"] else "-",
                                     linewidth=1.5, zorder=1))
        _tip(fig, box, f"{'retraction of a ' if p['retraction'] else ''}{p['timing']} pane "
                       f"{p['pane_index']} of window [{_seconds(p['window_start_us']):g} s, "
                       f"{_seconds(p['window_end_us']):g} s): {p['value']}, fired at {top:g} s")
        if p["retraction"]:   # under the line, where the pane that replaces it is not
            ax.text((_seconds(start) + _seconds(end)) / 2, top, f"-{p['value']} ({p['timing']})",
                    ha="center", va="top", fontsize=7, color="#555555", style="italic", zorder=4)
        else:
            ax.text((_seconds(start) + _seconds(end)) / 2, top, f"{p['value']} ({p['timing']})",
                    ha="center", va="bottom", fontsize=8, color="black", zorder=4)
        fired_before[(p["window_start_us"], p["window_end_us"])] = top
        ys.append(top)
    for e in data["element"]:
        x, y = _seconds(e["event_time_us"]), _seconds(e["processing_time_us"])
        dot, = ax.plot([x], [y], "o", color="black", markersize=5, zorder=3)
        _tip(fig, dot, f"element {e['value']}: event time {x:g} s, arrived at {y:g} s")
        ax.annotate(str(e["value"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        xs.append(x)
        ys.append(y)
    for d in data["dropped"]:
        x, y = _seconds(d["event_time_us"]), _seconds(d["processing_time_us"])
        cross, = ax.plot([x], [y], "x", color="#d62728", markersize=9, mew=2, zorder=5)
        _tip(fig, cross, f"dropped ({d['reason']}): {d['value']}, event time {x:g} s, "
                         f"arrived at {y:g} s")
    wm = [(_seconds(w["watermark_us"]), _seconds(w["processing_time_us"])) for w in data["watermark"]
          if abs(w["watermark_us"]) < _FAR]
    if wm:
        # a step line: the watermark holds until the processing time it next moves at
        line_x, line_y = [wm[0][0]], [wm[0][1]]
        for (x0, _), (x1, y1) in zip(wm, wm[1:]):
            line_x += [x0, x1]
            line_y += [y1, y1]
        ax.plot(line_x, line_y, "--", color="#555555", linewidth=1.2, label="watermark", zorder=2)
        ax.legend(loc="upper left", fontsize=8)
    if xs:
        lo, hi = min(xs), max(xs)
        pad = (hi - lo) * 0.05 or 1.0
        ax.set_xlim(lo - pad, hi + pad)
    ax.set_ylim(min(ys) - 1, max(ys) * 1.08 + 1)
    if output is not None:
        _save(fig, output)
    return fig


def _tip(fig: Any, artist: Any, text: str) -> None:
    """Gives `artist` an id and keeps `text` as its tooltip in the HTML form (`_save`)."""
    tips = fig.__dict__.setdefault("headrace_tips", {})
    gid = f"hr-{len(tips)}"
    artist.set_gid(gid)
    tips[gid] = text


def _with_tips(svg: str, tips: Dict[str, str]) -> str:
    """The SVG with each tipped artist's group given a <title> (a browser shows it on hover)."""
    for gid, text in tips.items():
        svg = svg.replace(f'<g id="{gid}">', f'<g id="{gid}"><title>{html.escape(text)}</title>', 1)
    return svg


def _data_span(data: Dict[str, Any]) -> Tuple[int, int]:
    times = [e["event_time_us"] for e in data["element"]] or [0]
    return min(times), max(times) + 1


def svg_text(fig: Any) -> str:
    """The figure as SVG text: its labels as text, and the same bytes for the same drawing
    (no date, ids from a fixed salt)."""
    from matplotlib import rc_context
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "headrace"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    return buf.getvalue()


def _save(fig: Any, output: str) -> None:
    ext = os.path.splitext(output)[1].lower()
    if ext == ".png":
        fig.savefig(output, format="png", bbox_inches="tight")
        return
    if ext == ".svg":
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(svg_text(fig))
        return
    if ext in (".html", ".htm"):   # the SVG, each element, pane and drop with a hover text
        svg = _with_tips(svg_text(fig), getattr(fig, "headrace_tips", {}))
        title = html.escape(fig.axes[0].get_title()) if fig.axes else "pane diagram"
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title>"
                     f"</head><body>\n{svg}\n</body></html>\n")
        return
    raise InvalidArgumentError(f"diagram output {output!r}: use a .svg, .png or .html file name")


def main(argv: Optional[List[str]] = None) -> int:
    """`headrace diagram DIR --step LABEL [--key K] [-o FILE]`."""
    import argparse
    parser = argparse.ArgumentParser(prog="headrace diagram",
                                     description="Draw the pane diagram of one key of a recorded "
                                                 "grouping step (run with --record_panes=DIR first).")
    parser.add_argument("directory", help="the --record_panes directory")
    parser.add_argument("--step", help="the grouping step's label (default: the only one recorded)")
    parser.add_argument("--key", help="the key, as str() prints it (default: the one with most elements)")
    parser.add_argument("-o", "--output", default=None, help="the .svg, .png or .html file to write "
                                                             "(default: STEP-KEY.svg)")
    args = parser.parse_args(argv)
    step = args.step
    if step is None:
        steps = recorded_steps(args.directory) if os.path.isdir(args.directory) else []
        if len(steps) != 1:
            parser.error(f"--step is needed: the recording has {len(steps)} steps "
                         f"({', '.join(steps) or 'none'})")
        step = steps[0]
    try:
        data = panes_of(args.directory, step, args.key)
        output = args.output or f"{safe_name(step, 60, 'x')}-{safe_name(data['key'], 60, 'x')}.svg"
        _draw(data, step, output, None)
    except InvalidArgumentError as exc:
        print(f"headrace diagram: {exc}")
        return 2
    print(f"headrace diagram: wrote {output}")
    return 0

