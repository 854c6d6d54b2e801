"""headrace's own graph renderer: a layered drawing of a directed acyclic graph as SVG.

Boxes are put in layers by their longest path from a source (a step sits one layer below the
lowest of the steps it reads from), ordered within a layer by the mean position of their
producers (a few sweeps down and up, the barycentre heuristic of Sugiyama's layered drawing),
and joined by curved arrows labelled with what flows along them. It needs nothing installed;
the run report (`headrace.report`) draws its graph with it, and `headrace graph` its .html and,
when Graphviz's `dot` is missing, its .svg.
"""

from __future__ import annotations

import html
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

_CHAR = 6.6       # px per character of the 12 px label font (an estimate: no font metrics here)
_MIN_W, _MAX_W, _H = 110.0, 300.0, 34.0
_GAP_X, _GAP_Y, _MARGIN = 28.0, 64.0, 16.0

#: fill colours of the boxes by kind of step (the legend of the report says which is which)
FILLS = {"source": "#e3f1e4", "grouping": "#fde9c8", "stateful": "#f6dcef", "step": "#eef3fb"}


class Box(NamedTuple):
    """A box to draw: its id, its text, its tooltip, its kind (a key of `FILLS`) and its group
    (a fused stage's number, or None), shown as a tag in its corner."""

    id: str
    label: str
    tooltip: str = ""
    kind: str = "step"
    group: Optional[int] = None


class Arrow(NamedTuple):
    """An arrow from box `src` to box `dst`, with a label (say, the elements that went along
    it), dashed for a side input."""

    src: str
    dst: str
    label: str = ""
    dashed: bool = False
    tooltip: str = ""


def layers(boxes: Sequence[Box], arrows: Sequence[Arrow]) -> Dict[str, int]:
    """Each box's layer: its longest path from a box nothing points to (arrows that would close
    a cycle are ignored)."""
    order = {b.id: i for i, b in enumerate(boxes)}
    layer = {b.id: 0 for b in boxes}
    # boxes come in application order, producers before readers; a few passes settle the rest
    for _ in range(len(boxes)):
        changed = False
        for a in arrows:
            if a.src in layer and a.dst in layer and order[a.src] < order[a.dst] \
                    and layer[a.dst] < layer[a.src] + 1:
                layer[a.dst] = layer[a.src] + 1
                changed = True
        if not changed:
            break
    return layer


def _width(label: str) -> float:
    return max(_MIN_W, min(_MAX_W, len(label) * _CHAR + 24))


def _fit(label: str, width: float) -> str:
    room = int((width - 20) / _CHAR)
    return label if len(label) <= room else "\u2026" + label[-(room - 1):]


def place(boxes: Sequence[Box], arrows: Sequence[Arrow]
          ) -> Tuple[Dict[str, Tuple[float, float, float]], float, float]:
    """Each box's (x, y, width) (x, y: its top-left corner), and the drawing's width and height."""
    layer = layers(boxes, arrows)
    rows: List[List[str]] = [[] for _ in range(max(layer.values(), default=-1) + 1)]
    for b in boxes:
        rows[layer[b.id]].append(b.id)
    ups: Dict[str, List[str]] = {b.id: [] for b in boxes}
    downs: Dict[str, List[str]] = {b.id: [] for b in boxes}
    for a in arrows:
        if a.src in layer and a.dst in layer and layer[a.src] < layer[a.dst]:
            ups[a.dst].append(a.src)
            downs[a.src].append(a.dst)
    pos = {i: float(k) for row in rows for k, i in enumerate(row)}
    for sweep in range(6):   # barycentre sweeps, alternately down and up
        seq = rows if sweep % 2 == 0 else list(reversed(rows))
        for row in seq:
            near = ups if sweep % 2 == 0 else downs
            bary = {i: (sum(pos[j] for j in near[i]) / len(near[i]) if near[i] else pos[i])
                    for i in row}
            row.sort(key=lambda i: (bary[i], pos[i]))
            for k, i in enumerate(row):
                pos[i] = float(k)
    label_of = {b.id: b.label for b in boxes}
    widths = {b.id: _width(label_of[b.id]) for b in boxes}
    row_w = [sum(widths[i] for i in row) + _GAP_X * (len(row) - 1) for row in rows]
    total_w = max(row_w, default=0.0) + 2 * _MARGIN
    out: Dict[str, Tuple[float, float, float]] = {}
    for r, row in enumerate(rows):
        x = (total_w - row_w[r]) / 2
        for i in row:
            out[i] = (x, _MARGIN + r * (_H + _GAP_Y), widths[i])
            x += widths[i] + _GAP_X
    height = _MARGIN * 2 + len(rows) * _H + max(len(rows) - 1, 0) * _GAP_Y
    return out, total_w, height


def svg(boxes: Sequence[Box], arrows: Sequence[Arrow], title: str = "pipeline") -> str:
    """The graph drawn as an SVG element (text of a whole `<svg>`, usable as a file or inline)."""
    at, width, height = place(boxes, arrows)
    esc = html.escape
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="hr-graph" width="{width:.0f}" '
             f'height="{height:.0f}" viewBox="0 0 {width:.0f} {height:.0f}" role="img" '
             f'aria-label="{esc(title)}" font-family="Helvetica, Arial, sans-serif">',
             '<defs><marker id="hr-arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
             'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
             'fill="#666"/></marker></defs>']
    for a in arrows:
        if a.src not in at or a.dst not in at:
            continue
        (x1, y1, w1), (x2, y2, w2) = at[a.src], at[a.dst]
        sx, sy, ex, ey = x1 + w1 / 2, y1 + _H, x2 + w2 / 2, y2
        if ey <= sy:   # against the layering (a cycle's back edge): from the side
            sx, sy, ex, ey = x1 + w1, y1 + _H / 2, x2 + w2, y2 + _H / 2
        bend = max(24.0, (ey - sy) / 2)
        d = f"M{sx:.1f},{sy:.1f} C{sx:.1f},{sy + bend:.1f} {ex:.1f},{ey - bend:.1f} {ex:.1f},{ey:.1f}"
        dash = ' stroke-dasharray="5,4"' if a.dashed else ""
        tip = f"<title>{esc(a.tooltip)}</title>" if a.tooltip else ""
        parts.append(f'<g class="hr-edge">{tip}<path d="{d}" fill="none" stroke="#666" '
                     f'stroke-width="1.3"{dash} marker-end="url(#hr-arrow)"/>')
        if a.label:
            mx, my = (sx + ex) / 2, (sy + ey) / 2
            lw = len(a.label) * 6.0 + 8
            parts.append(f'<rect x="{mx - lw / 2:.1f}" y="{my - 8:.1f}" width="{lw:.1f}" height="15" '
                         f'rx="3" fill="#ffffff" fill-opacity="0.9"/><text class="hr-edge-label" '
                         f'x="{mx:.1f}" y="{my + 3.5:.1f}" font-size="10.5" text-anchor="middle" '
                         f'fill="#333">{esc(a.label)}</text>')
        parts.append("</g>")
    for b in boxes:
        x, y, w = at[b.id]
        fill = FILLS.get(b.kind, FILLS["step"])
        tip = esc(b.tooltip or b.label)
        parts.append(f'<g class="hr-node hr-{esc(b.kind)}" data-step="{esc(b.label)}"><title>{tip}</title>'
                     f'<rect x="{x:.1f}" y="{y:.1f}" width="{w:.1f}" height="{_H:.0f}" rx="7" '
                     f'fill="{fill}" stroke="#7a8aa0"/><text x="{x + w / 2:.1f}" y="{y + _H / 2 + 4:.1f}" '
                     f'font-size="12" text-anchor="middle" fill="#1d2733">{esc(_fit(b.label, w))}</text>')
        if b.group is not None:
            parts.append(f'<text x="{x + w - 5:.1f}" y="{y + 10:.1f}" font-size="8.5" '
                         f'text-anchor="end" fill="#5b6b80">stage {b.group}</text>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)
