"""The pipeline graph on its own: `Pipeline.to_dot()` and `headrace graph script.py`."""

import re
import shutil
import textwrap

import pytest

import headrace as beam
from headrace import cli


def _pipeline():
    p = beam.Pipeline()
    lines = p | "Read" >> beam.Create(["a b", "b c"])
    words = lines | "Split" >> beam.FlatMap(str.split)
    total = lines | "Count" >> beam.combiners.Count.Globally()
    _ = (words | "Pair" >> beam.Map(lambda w: (w, 1)) | "Sum" >> beam.CombinePerKey(sum)
         | "Fmt" >> beam.Map(lambda kv, n: f"{kv}/{n}", beam.pvalue.AsSingleton(total)))
    return p


def _edges(dot):
    labels = dict(re.findall(r"^\s*(n\d+) \[label=\"([^\"]*)\"", dot, re.M))
    return {(labels[a], labels[b], "dashed" in rest)
            for a, b, rest in re.findall(r"^\s*(n\d+) -> (n\d+)(.*);$", dot, re.M)}


def test_to_dot_draws_a_box_per_top_level_step_and_an_arrow_per_pcollection():
    dot = _pipeline().to_dot()
    assert dot.startswith("digraph pipeline {") and dot.rstrip().endswith("}")
    assert _edges(dot) == {("Read", "Split", False), ("Read", "Count", False),
                           ("Split", "Pair", False), ("Pair", "Sum", False), ("Sum", "Fmt", False),
                           ("Count", "Fmt", True)}


def test_to_dot_expanded_draws_every_primitive_inside_its_composites():
    p = _pipeline()
    dot = p.to_dot(expand=True)
    tooltips = set(re.findall(r'tooltip="([^"]*)"', dot))
    assert tooltips == {n.full_label for n in p.primitives()}
    assert 'label="Count";' in dot and "subgraph cluster" in dot


SCRIPT = '''
import sys
import headrace as beam

class Mark(beam.DoFn):
    def process(self, x):
        open(sys.argv[1], "w").write("ran")
        yield x

with beam.Pipeline() as p:
    _ = p | "Numbers" >> beam.Create([1, 2]) | "Mark" >> beam.ParDo(Mark())
'''


def test_headrace_graph_draws_a_scripts_pipeline_without_running_it(tmp_path, capsys, monkeypatch):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    marker = tmp_path / "ran"
    assert cli.main(["graph", str(script), "--", str(marker)]) == 0
    assert _edges(capsys.readouterr().out) == {("Numbers", "Mark", False)}
    assert not marker.exists()   # captured at run(), never run
    out = tmp_path / "g.dot"
    assert cli.main(["graph", str(script), "-o", str(out), "--", str(marker)]) == 0
    assert out.read_text().startswith("digraph")
    empty = tmp_path / "empty.py"
    empty.write_text("x = 1\n")
    assert cli.main(["graph", str(empty)]) == 2
    assert "ran no pipeline" in capsys.readouterr().out
    with monkeypatch.context() as m:   # no Graphviz: .svg and .html drawn by headrace, .png refused
        m.setattr(shutil, "which", lambda name: None)
        for ext in ("svg", "html"):
            out = tmp_path / f"own.{ext}"
            assert cli.main(["graph", str(script), "-o", str(out), "--", str(marker)]) == 0
            drawn = out.read_text()
            assert re.findall(r'data-step="([^"]*)"', drawn) == ["Numbers", "Mark"]
            assert drawn.count('<g class="hr-edge">') == 1
        assert cli.main(["graph", str(script), "-o", str(tmp_path / "g.png"), "--", str(marker)]) == 2
        assert "apt-get install graphviz" in capsys.readouterr().out


def test_the_own_renderer_puts_readers_below_producers_and_marks_side_inputs():
    from headrace.utils import layered_graph
    from headrace.pipeline.graph import to_svg
    drawn = to_svg(_pipeline())
    tops = {label: float(y) for label, y in re.findall(
        r'data-step="([^"]*)"><title>[^<]*</title><rect x="[\d.]+" y="([\d.]+)"', drawn)}
    assert tops["Read"] < tops["Split"] < tops["Pair"] < tops["Sum"] < tops["Fmt"]
    assert tops["Count"] < tops["Fmt"]   # the side input's producer above its reader
    assert drawn.count('stroke-dasharray') == 1 and ">side input<" in drawn
    assert layered_graph.layers([layered_graph.Box("a", "a"), layered_graph.Box("b", "b")],
                                [layered_graph.Arrow("a", "b")]) == {"a": 0, "b": 1}


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot (Debian: graphviz)")
def test_headrace_graph_renders_svg_and_png_with_graphviz(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(SCRIPT))
    for ext, head in (("svg", b"<?xml"), ("png", b"\x89PNG")):
        out = tmp_path / f"g.{ext}"
        assert cli.main(["graph", str(script), "-o", str(out), "--", str(tmp_path / "m")]) == 0
        assert out.read_bytes().startswith(head)
        if ext == "svg":
            assert b"Numbers" in out.read_bytes() and b"Mark" in out.read_bytes()
