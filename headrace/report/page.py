"""The run report as one self-contained HTML page (inline SVG and CSS, no script, no fetches)."""

from __future__ import annotations

import datetime
import html
from typing import Any, Dict, List, Optional, Tuple

from headrace.utils import layered_graph as layout

_CSS = """
body{font-family:Helvetica,Arial,sans-serif;margin:24px 32px;color:#1d2733;background:#fafbfc}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #dde3ea;
padding-bottom:4px} .meta{color:#5b6b80;font-size:13px} .state-DONE{color:#2c7a3f}
.state-FAILED{color:#b3261e} .state-RUNNING{color:#a05a00} .error{background:#fdecea;border:1px solid
#f3b8b2;padding:8px 12px;white-space:pre-wrap;font-family:monospace;font-size:12px}
table{border-collapse:collapse;font-size:13px;margin:4px 0} td,th{border:1px solid #dde3ea;padding:3px 8px;
text-align:left;vertical-align:top} th{background:#eef2f6} td.n{text-align:right;font-variant-numeric:
tabular-nums} .graph{overflow:auto;background:#fff;border:1px solid #dde3ea;padding:8px}
.plots{display:flex;flex-wrap:wrap;gap:12px} .plot{background:#fff;border:1px solid #dde3ea}
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;border:1px solid #7a8aa0;
border-radius:5px;font-size:12px} .note{color:#5b6b80;font-size:12px}
"""


#: One line of a plot: its name, its x values and its y values.
Series = Tuple[str, List[float], List[float]]

def _fmt(value: Any) -> str:
    if isinstance(value, dict):
        if "count" in value and "sum" in value:   # a distribution
            if not value["count"]:
                return "none"
            return (f"count {value['count']:,}, mean {value['sum'] / value['count']:,.4g}, "
                    f"min {value['min']:,}, max {value['max']:,}")
        return str(value.get("value"))
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _time(seconds: Optional[float]) -> str:
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M:%S UTC")


def graph_svg(graph: Dict[str, Any], counts: Dict[str, int]) -> str:
    """The pipeline graph as SVG, each edge labelled with the elements that went along it."""
    boxes = [layout.Box(n["id"], n["label"], f"{n['label']} ({n['transform']})", n["kind"],
                        n.get("stage")) for n in graph["nodes"]]
    arrows = []
    for e in graph["edges"]:
        label = ""
        if e.get("count"):
            n = counts.get("\x00".join(e["count"]))
            label = f"{n:,}" if n is not None else ""
        tip = e["pcollection"] + (" (side input)" if e["side"] else "") + \
            (" (fused: passed on by a call)" if e.get("fused") else "")
        arrows.append(layout.Arrow(e["src"], e["dst"], label or e.get("tag") or "", e["side"], tip))
    return layout.svg(boxes, arrows)


def _plot(title: str, ylabel: str, series: List[Series]) -> str:
    """One line plot as SVG text (matplotlib; the pane diagrams' `svg_text`)."""
    from matplotlib.figure import Figure

    from headrace.diagram import svg_text
    fig = Figure(figsize=(5.2, 2.7))
    ax = fig.add_subplot()
    for name, xs, ys in series:
        ax.plot(xs, ys, marker="o", markersize=2.5, linewidth=1.2, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("micro-batch", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(labelsize=7)
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=7)
    text = svg_text(fig)
    return text[text.index("<svg"):]   # inline: without the XML prologue


def rate_series(batches: List[Dict[str, Any]]) -> Tuple[str, str, List[Series]]:
    """The rate plot's title, unit and series: the records the reads produced per second in
    each micro-batch whose count is known (one whose driver state was dropped is left out, not
    drawn as 0), or Spark's input rows per second when the run counted no records."""
    known = [b for b in batches if b.get("records_read") is not None]
    if known:
        return "records read per second", "records/s", [(
            "records/s", [float(b["batch"]) for b in known],
            [b["records_read"] / b["duration_s"] if b["duration_s"] else 0.0 for b in known])]
    return "input rows per second", "rows/s", [
        ("rows/s", [float(b["batch"]) for b in batches],
         [b["rows_per_second"] for b in batches])]


def plots(batches: List[Dict[str, Any]]) -> List[str]:
    """A streaming run's plots over its micro-batches: the records its reads produced per second
    (or, without splittable or unbounded reads, Spark's input rows per second), batch durations,
    each source step's watermark lag and each grouping's input and output watermark lag (behind
    their processing time) and the late elements dropped."""
    if not batches:
        return []
    xs = [float(b["batch"]) for b in batches]
    rate = _plot(*rate_series(batches))
    out = [rate,
           _plot("micro-batch duration", "seconds",
                 [("duration", xs, [b["duration_s"] or 0.0 for b in batches])])]
    lags: Dict[str, Tuple[List[float], List[float]]] = {}
    for b in batches:
        series = [(f"{step} (source)", marks.get("output_lag_s"))
                  for step, marks in sorted(b.get("source_watermarks", {}).items())]
        series += [(f"{step} {side}", marks.get(side + "_lag_s"))
                   for step, marks in sorted(b.get("watermarks", {}).items())
                   for side in ("input", "output")]
        for name, lag in series:
            if lag is not None:
                xs_, ys_ = lags.setdefault(name, ([], []))
                xs_.append(float(b["batch"]))
                ys_.append(lag)
    if lags:
        out.append(_plot("watermark lag (processing time - watermark)", "seconds",
                         [(name, v[0], v[1]) for name, v in lags.items()]))
    out.append(_plot("late elements dropped (so far)", "elements",
                     [("dropped", xs, [float(b.get("late_dropped", 0)) for b in batches])]))
    return out


def _table(headers: List[str], rows: List[List[str]], numeric: Tuple[int, ...] = ()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(
        f"<td class='n'>{html.escape(c)}</td>" if i in numeric else f"<td>{html.escape(c)}</td>"
        for i, c in enumerate(r)) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def render(data: Dict[str, Any]) -> str:
    """The report page for `data` (see `headrace.report.data`)."""
    esc = html.escape
    run = data["run"]
    summary = data["summary"]
    state = run.get("state", "RUNNING")
    refresh = (f'<meta http-equiv="refresh" content="{max(1, int(run["refresh_seconds"]))}">'
               if state == "RUNNING" and run.get("refresh_seconds") else "")
    parts = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>{refresh}"
             f"<title>headrace run report: {esc(run['name'])}</title><style>{_CSS}</style></head><body>",
             f"<h1>headrace run report: {esc(run['name'])}</h1>",
             f"<div class='meta'>runner {esc(run['runner'])} &middot; state <b class='state-{esc(state)}'>"
             f"{esc(state)}</b> &middot; started {_time(run.get('started'))} &middot; "
             f"{'finished' if state != 'RUNNING' else 'updated'} {_time(run.get('updated'))} "
             f"&middot; {run.get('elapsed_s', 0):.1f} s</div>"]
    if run.get("error"):
        parts.append(f"<div class='error'>{esc(run['error'])}</div>")
    parts.append("<h2 id='graph'>Pipeline graph</h2><div class='legend'>"
                 + "".join(f"<span style='background:{c}'>{k}</span>" for k, c in layout.FILLS.items())
                 + "<span style='border-style:dashed'>side input</span></div>"
                 "<p class='note'>Each arrow is labelled with the elements that went along it "
                 "(in bundles that succeeded); a box's corner names its fused stage.</p>")
    parts.append(f"<div class='graph'>{graph_svg(data['graph'], summary['counts'])}</div>")
    batches = data.get("batches") or []
    if batches:
        parts.append("<h2 id='streaming'>Micro-batches</h2>")
        try:
            figures = plots(batches)
            parts.append("<div class='plots'>"
                         + "".join(f"<div class='plot'>{f}</div>" for f in figures) + "</div>")
        except ImportError:
            parts.append("<p class='note'>The plots need matplotlib: pip install 'headrace[diagrams]'.</p>")
        last = batches[-1]
        parts.append(f"<p class='meta'>{len(batches)} micro-batches; the last: batch {last['batch']}, "
                     f"{last['rows']:,} input rows, {last['state_rows']:,} state rows</p>")
    parts.append("<h2 id='late'>Late data</h2>")
    late = summary["late"]
    parts.append(_table(["step", "late elements dropped", "elements for closed windows dropped"],
                        [[s, f"{v.get('dropped_late_elements', 0):,}",
                          f"{v.get('dropped_closed_window_elements', 0):,}"]
                         for s, v in sorted(late.items())],
                        (1, 2)) if late else "<p class='note'>No grouping step dropped data.</p>")
    parts.append("<h2 id='dead-letters'>Dead letters</h2>")
    dead = summary["dead_letters"]
    parts.append(_table(["step", "elements", "last error"],
                        [[s, f"{v.get('count', 0):,}", str(v.get("sample") or "")]
                         for s, v in sorted(dead.items())], (1,))
                 if dead else "<p class='note'>No element went to a dead-letter output.</p>")
    parts.append("<h2 id='metrics'>Metrics</h2>")
    shown = [m for m in data["metrics"] if m["namespace"] != "headrace.elements"]
    shown.sort(key=lambda m: (m["namespace"].startswith("headrace"), m["step"], m["name"]))
    parts.append(_table(["step", "namespace", "name", "kind", "committed", "attempted"],
                        [[m["step"], m["namespace"], m["name"], m["kind"], _fmt(m["committed"]),
                          _fmt(m["attempted"])] for m in shown])
                 if shown else "<p class='note'>The run reported no metrics.</p>")
    diagrams = data.get("diagrams") or []
    if diagrams:
        parts.append("<h2 id='diagrams'>Pane diagrams</h2><ul>")
        for d in diagrams:
            if d.get("file"):
                parts.append(f"<li><a href='{esc(d['file'])}'>{esc(d['step'])}</a> "
                             f"(key {esc(str(d['key']))}; <code>headrace diagram</code> draws "
                             "the others)</li>")
            else:
                parts.append(f"<li>{esc(d['step'])}: {esc(str(d.get('error')))}</li>")
        parts.append("</ul>")
    parts.append("</body></html>\n")
    return "".join(parts)
