"""What a run report shows, as plain data (`report.json`): the graph, metrics, dead letters,
late data, a streaming run's micro-batches and the pane diagrams recorded."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from headrace.runners.kit.dofn_runner import DEAD_LETTER_SAMPLE, DEAD_LETTERS
from headrace.runners.kit.grouping import DROPPED_CLOSED, DROPPED_LATE
from headrace.runners.kit.plan import Kind, Stage, plan
from headrace.runners.kit.stage import ELEMENTS

if TYPE_CHECKING:
    from headrace.pipeline.pipeline import Pipeline

_KIND_NAMES = {Kind.SOURCE: "source", Kind.UNBOUNDED: "source", Kind.TEST_STREAM: "source",
               Kind.GROUPING: "grouping", Kind.STATEFUL: "stateful", Kind.SPLITTABLE: "source"}


def graph(pipeline: "Pipeline") -> Dict[str, Any]:
    """The pipeline's primitive steps (each with its kind and fused stage) and the PCollections
    between them, each edge with where its element count is (`count`: None when it passes
    inside a fused stage, which does not count it)."""
    from headrace.pipeline import graph as pipeline_graph
    units = plan(pipeline, "run report")
    stage_of: Dict[int, int] = {}
    kind_of: Dict[int, str] = {}
    number = 0
    for u in units:
        if isinstance(u, Stage):
            number += 1
            for n in u.nodes:
                stage_of[id(n)] = number
        else:
            kind_of[id(u.node)] = _KIND_NAMES.get(u.kind, "step")
    nodes = pipeline_graph.boxes(pipeline, expand=True)
    ids = {id(n): f"n{i}" for i, n in enumerate(nodes)}
    out_nodes = []
    for n in nodes:
        out_nodes.append({"id": ids[id(n)], "label": n.full_label, "kind": kind_of.get(id(n), "step"),
                          "transform": type(n.transform).__name__, "stage": stage_of.get(id(n))})
    out_edges = []
    for e in pipeline_graph.edges(pipeline, expand=True):
        src_stage, dst_stage = stage_of.get(id(e.src)), stage_of.get(id(e.dst))
        count: Optional[List[str]] = None
        if dst_stage is not None and not e.side:
            count = [e.dst.full_label, "elements_in"]
        elif src_stage is not None and src_stage != dst_stage:
            name = "elements_out" if not e.label else f"elements_out:{e.label}"
            count = [e.src.full_label, name]
        out_edges.append({"src": ids[id(e.src)], "dst": ids[id(e.dst)], "tag": e.label,
                          "pcollection": f"{e.src.full_label}.{e.label or 'out'}",
                          "side": e.side, "count": count,
                          "fused": src_stage is not None and src_stage == dst_stage})
    return {"nodes": out_nodes, "edges": out_edges, "stages": number}


def _plain(value: Any) -> Any:
    """A metric's value as JSON data."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    return repr(value)


def metrics(result: Any) -> List[Dict[str, Any]]:
    """Every metric of the run: kind, step, namespace, name, committed and attempted values."""
    try:
        results = result.metrics().query()
    except Exception:   # a run that failed before it had metrics
        return []
    out = []
    for kind, items in results.items():
        for r in items:
            out.append({"kind": kind[:-1], "step": r.key.step, "namespace": r.key.metric.namespace,
                        "name": r.key.metric.name, "committed": _plain(r.committed),
                        "attempted": _plain(r.attempted)})
    return out


def summary(rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """From the metrics: element counts (by (step, name)), dead letters and late data by step."""
    counts: Dict[str, int] = {}
    dead: Dict[str, Dict[str, Any]] = {}
    late: Dict[str, Dict[str, int]] = {}
    for m in rows:
        if m["namespace"] == ELEMENTS and m["kind"] == "counter":
            counts[f"{m['step']}\x00{m['name']}"] = int(m["committed"])
        elif m["namespace"] == "headrace" and m["name"] == DEAD_LETTERS:
            dead.setdefault(m["step"], {})["count"] = int(m["committed"])
        elif m["namespace"] == "headrace" and m["name"] == DEAD_LETTER_SAMPLE:
            value = m["committed"].get("value") if isinstance(m["committed"], dict) else None
            dead.setdefault(m["step"], {})["sample"] = value
        elif m["namespace"] == "headrace" and m["name"] in (DROPPED_LATE, DROPPED_CLOSED):
            late.setdefault(m["step"], {})[m["name"]] = int(m["committed"])
    return {"counts": counts, "dead_letters": dead, "late": late}


def diagrams(record_dir: Optional[str], out_dir: str) -> List[Dict[str, Any]]:
    """Draws each recorded grouping step's busiest key (`--record_panes`) as an SVG under
    `out_dir`/diagrams; returns (step, key, file relative to `out_dir`, error) per step."""
    if not record_dir or not os.path.isdir(record_dir):
        return []
    from headrace.diagram import _draw, panes_of
    from headrace.diagram.recording import recorded_steps, safe_name
    out = []
    os.makedirs(os.path.join(out_dir, "diagrams"), exist_ok=True)
    for step in recorded_steps(record_dir):
        entry: Dict[str, Any] = {"step": step, "key": None, "file": None, "error": None}
        try:
            data = panes_of(record_dir, step)
            entry["key"] = data["key"]
            name = os.path.join("diagrams", f"{safe_name(step, 60, 'x')}.svg")
            _draw(data, step, os.path.join(out_dir, name), None)
            entry["file"] = name
        except Exception as exc:   # matplotlib missing, an empty recording: said in the report
            entry["error"] = f"{type(exc).__name__}: {exc}"
        out.append(entry)
    return out
