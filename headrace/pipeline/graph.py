"""The pipeline graph on its own: `Pipeline.to_dot()` (Graphviz's DOT language) and `render`.

`to_dot(pipeline)` gives one box per step the user applied at the top level (a composite drawn
as one box, as Beam's interactive `PipelineGraph` shows it), an arrow per PCollection from its
producer to each step that reads it (dashed for a side input), labelled with the PCollection's
name when it is not the producer's main output; `expand=True` draws every primitive step inside
a cluster per composite instead. `render(dot_text, path)` writes `.dot` as is and `.svg` /
`.png` through Graphviz's `dot` program (Debian's `graphviz` package) when it is installed;
`to_svg(pipeline)` draws the graph with headrace's own renderer (`utils.layered_graph`, the
run report's), which `headrace graph` uses for `.html`, and for `.svg` when `dot` is missing.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import TYPE_CHECKING, Dict, List, NamedTuple, Optional, Set, Tuple

from headrace.errors import InvalidArgumentError

if TYPE_CHECKING:
    from headrace.pipeline.pipeline import AppliedPTransform, Pipeline
    from headrace.pipeline.pvalue import PCollection


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _top(node: "AppliedPTransform") -> "AppliedPTransform":
    while node.parent is not None and node.parent.parent is not None:
        node = node.parent
    return node


class Edge(NamedTuple):
    """An arrow of the graph: a PCollection from its producer's box to a box that reads it."""

    src: "AppliedPTransform"
    dst: "AppliedPTransform"
    pcoll: "PCollection"
    side: bool          # read as a side input

    @property
    def label(self) -> str:
        """The PCollection's tag when it is not its producer's main output, else ""."""
        return self.pcoll.tag if self.pcoll.tag is not None else ""


def boxes(pipeline: "Pipeline", expand: bool = False) -> List["AppliedPTransform"]:
    """The steps drawn as boxes: those applied at the top level (a composite as one box), or
    with `expand` every primitive step."""
    if expand:
        return pipeline.primitives()
    return [n for n in pipeline.transforms() if n.parent is not None and n.parent.parent is None]


def edges(pipeline: "Pipeline", expand: bool = False) -> List[Edge]:
    """The arrows between `boxes(pipeline, expand)`, each (producer, reader, PCollection, side)
    once."""
    nodes = boxes(pipeline, expand)
    known = {id(n) for n in nodes}
    view = (lambda n: n) if expand else _top
    out: List[Edge] = []
    seen: Set[Tuple[int, int, int, bool]] = set()
    for n in nodes:
        # a composite box reads what its primitive parts read from outside it
        parts = [n] if expand else [part for part in n.walk() if part.is_primitive()]
        inputs = [(pc, False) for part in parts for pc in part.inputs]
        inputs += [(s.pvalue, True) for part in parts for s in part.side_inputs]
        for pc, side in inputs:
            producer = view(pc.producer)
            if id(producer) not in known or producer is n:
                continue
            key = (id(producer), id(n), id(pc), side)
            if key not in seen:
                seen.add(key)
                out.append(Edge(producer, n, pc, side))
    return out


def to_dot(pipeline: "Pipeline", expand: bool = False) -> str:
    """The pipeline's graph in Graphviz's DOT language (see the module doc)."""
    nodes = boxes(pipeline, expand)
    ids: Dict[int, str] = {id(n): f"n{i}" for i, n in enumerate(nodes)}
    lines = ["digraph pipeline {", "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor="#eef3fb", fontname="Helvetica", '
             'fontsize=11];', '  edge [fontname="Helvetica", fontsize=9, color="#555555"];']
    if expand:
        lines += _clusters(pipeline, ids)
    else:
        for n in nodes:
            kind = type(n.transform).__name__ if n.transform is not None else ""
            lines.append(f"  {ids[id(n)]} [label={_quote(n.full_label)}, tooltip={_quote(kind)}];")
    seen: Set[Tuple[str, str, str, bool]] = set()
    for e in edges(pipeline, expand):
        edge = (ids[id(e.src)], ids[id(e.dst)], e.label, e.side)
        if edge in seen:   # two PCollections of one tag between the same boxes: one arrow
            continue
        seen.add(edge)
        attrs = [f"label={_quote(e.label)}"] if e.label else []
        if e.side:
            attrs.append('style=dashed, label="side input"' if not e.label else "style=dashed")
        lines.append(f"  {edge[0]} -> {edge[1]}" + (f" [{', '.join(attrs)}]" if attrs else "") + ";")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_svg(pipeline: "Pipeline", expand: bool = False) -> str:
    """The pipeline's graph drawn by headrace's own renderer (`utils.layered_graph`), as SVG:
    no Graphviz needed."""
    from headrace.utils import layered_graph
    nodes = boxes(pipeline, expand)
    ids = {id(n): f"n{i}" for i, n in enumerate(nodes)}
    drawn = [layered_graph.Box(ids[id(n)], n.full_label,
                               f"{n.full_label} ({type(n.transform).__name__})") for n in nodes]
    arrows = [layered_graph.Arrow(ids[id(e.src)], ids[id(e.dst)],
                                  "side input" if e.side and not e.label else e.label, e.side)
              for e in edges(pipeline, expand)]
    return layered_graph.svg(drawn, arrows)


def _clusters(pipeline: "Pipeline", ids: Dict[int, str]) -> List[str]:
    """The primitive steps inside nested clusters, one per composite."""
    out: List[str] = []

    def emit(node: "AppliedPTransform", indent: str) -> None:
        for part in node.parts:
            short = part.full_label.rsplit("/", 1)[-1]
            if id(part) in ids:
                out.append(f"{indent}{ids[id(part)]} [label={_quote(short)}, "
                           f"tooltip={_quote(part.full_label)}];")
            elif part.parts:
                out.append(f"{indent}subgraph cluster_{len(out)} {{")
                out.append(f"{indent}  label={_quote(short)}; style=rounded; color=\"#9aa7b8\"; "
                           "fontname=Helvetica; fontsize=10;")
                emit(part, indent + "  ")
                out.append(f"{indent}}}")
    emit(pipeline._root, "  ")
    return out


def render(dot_text: str, path: str, own_svg: Optional[str] = None) -> None:
    """Writes the graph to `path`: `.dot` as DOT text, `.svg` / `.png` drawn by Graphviz's
    `dot`; `.html` (a page) and, when `dot` is missing, `.svg` as `own_svg` (`to_svg`'s drawing)
    when given; else an error saying what to install."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if ext in ("dot", "gv"):
        _write(path, dot_text)
        return
    if ext not in ("svg", "png", "html", "htm"):
        raise InvalidArgumentError(f"graph output {path!r}: use a .dot, .svg, .png or .html file name")
    dot = shutil.which("dot")
    if ext in ("html", "htm") or (dot is None and ext == "svg" and own_svg is not None):
        if own_svg is None:
            raise InvalidArgumentError(f"graph output {path!r}: no drawing to write")
        _write(path, own_svg if ext == "svg" else
               "<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>pipeline graph</title>"
               f"</head><body>\n{own_svg}\n</body></html>\n")
        return
    if dot is None:
        raise InvalidArgumentError(
            f"drawing {path!r} needs Graphviz's dot program: install it (Debian: apt-get install "
            "graphviz), or write a .svg or .html file (headrace draws those itself)")
    subprocess.run([dot, f"-T{ext}", "-o", path], input=dot_text.encode("utf-8"), check=True)


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


class _Captured(BaseException):
    """Stops a script at its first `Pipeline.run` (a BaseException: a script's own
    `except Exception` lets it through)."""


def capture(script: str, args: List[str]) -> "Pipeline":
    """Runs the Python file `script` (as `__main__`, with `args` as its arguments) until it first
    runs a pipeline, and returns that pipeline, not run."""
    import runpy
    import sys

    from headrace.pipeline.pipeline import Pipeline
    captured: List[Pipeline] = []

    def run(self: Pipeline, test_runner_api: object = None) -> None:
        captured.append(self)
        raise _Captured()
    saved_run, saved_argv = Pipeline.run, sys.argv
    Pipeline.run = run  # type: ignore[assignment,method-assign]
    sys.argv = [script] + list(args)
    try:
        runpy.run_path(script, run_name="__main__")
    except _Captured:
        pass
    finally:
        Pipeline.run = saved_run  # type: ignore[method-assign]
        sys.argv = saved_argv
    if not captured:
        raise InvalidArgumentError(f"{script} ran no pipeline: `headrace graph` draws the first "
                                   "pipeline a script runs (p.run(), or the end of `with Pipeline()`)")
    return captured[0]


def main(argv: Optional[List[str]] = None) -> int:
    """`headrace graph script.py [--expand] [-o out.dot|svg|png] [-- script args]`."""
    import argparse
    parser = argparse.ArgumentParser(
        prog="headrace graph",
        description="Draw the graph of the first pipeline a script runs (without running it).")
    parser.add_argument("script", help="the Python file that builds and runs the pipeline")
    parser.add_argument("-o", "--output", default=None,
                        help="a .dot, .svg, .png or .html file (.png needs Graphviz's dot; .svg "
                             "is drawn by dot when it is installed, else by headrace, as .html "
                             "always is); default: the DOT text on standard output")
    parser.add_argument("--expand", action="store_true",
                        help="draw every primitive step, inside a cluster per composite")
    args, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    try:
        pipeline = capture(args.script, rest)
        text = to_dot(pipeline, args.expand)
        if args.output is None:
            print(text, end="")
            return 0
        render(text, args.output, to_svg(pipeline, args.expand))
    except InvalidArgumentError as exc:
        print(f"headrace graph: {exc}")
        return 2
    print(f"headrace graph: wrote {args.output}")
    return 0
