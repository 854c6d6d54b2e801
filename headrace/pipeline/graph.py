"""The pipeline graph on its own: `Pipeline.to_dot()` (Graphviz's DOT language) and `render`.

`to_dot(pipeline)` gives one box per step the user applied at the top level (a composite drawn
as one box, as Beam's interactive `PipelineGraph` shows it), an arrow per PCollection from its
producer to each step that reads it (dashed for a side input), labelled with the PCollection's
name when it is not the producer's main output; `expand=True` draws every primitive step inside
a cluster per composite instead. `render(dot_text, path)` writes `.dot` as is and `.svg` /
`.png` through Graphviz's `dot` program (Debian's `graphviz` package) when it is installed.
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


def render(dot_text: str, path: str) -> None:
    """Writes the graph to `path`: `.dot` as DOT text, `.svg` / `.png` drawn by Graphviz's
    `dot` (an error saying what to install when it is missing)."""
    ext = path.rsplit(".", 1)[-1].lower() if "." in path else ""
    if ext in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(dot_text)
        return
    if ext not in ("svg", "png"):
        raise InvalidArgumentError(f"graph output {path!r}: use a .dot, .svg or .png file name")
    dot = shutil.which("dot")
    if dot is None:
        raise InvalidArgumentError(
            f"drawing {path!r} needs Graphviz's dot program: install it (Debian: apt-get install "
            "graphviz), or write a .dot file and draw it elsewhere")
    subprocess.run([dot, f"-T{ext}", "-o", path], input=dot_text.encode("utf-8"), check=True)


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
                        help="a .dot, .svg or .png file (.svg and .png need Graphviz's dot); "
                             "default: the DOT text on standard output")
    parser.add_argument("--expand", action="store_true",
                        help="draw every primitive step, inside a cluster per composite")
    args, rest = parser.parse_known_args(argv)
    if rest and rest[0] == "--":
        rest = rest[1:]
    try:
        text = to_dot(capture(args.script, rest), args.expand)
        if args.output is None:
            print(text, end="")
            return 0
        render(text, args.output)
    except InvalidArgumentError as exc:
        print(f"headrace graph: {exc}")
        return 2
    print(f"headrace graph: wrote {args.output}")
    return 0
