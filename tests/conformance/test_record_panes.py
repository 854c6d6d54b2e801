"""Pane recording (`--record_panes`): what each grouping step's per-key core saw and did, on
every runner, read back with `headrace.diagram.recording.read_panes`."""

import re

import pytest

import headrace as beam
from headrace import cli, diagram
from headrace.errors import InvalidArgumentError
from headrace.examples import paper_figures
from headrace.examples.paper_figures import PAPER, paper_stream
from headrace.options.pipeline_options import PipelineOptions
from headrace.diagram.recording import RecordPanes, read_panes, recorded_steps
from headrace.testing.test_stream import TestStream
from headrace.testing.util import assert_that, equal_to
from headrace.transforms import trigger, window

class JournalPane(beam.DoFn):
    def __init__(self, journal):
        self.journal = journal

    def process(self, kv, w=beam.DoFn.WindowParam, pane=beam.DoFn.PaneInfoParam):
        self.journal.write(kv[0], kv[1], int(w.start.micros), pane.timing.name, pane.index)
        yield kv


def _streaming_sums(p, stream):
    return (p | stream
            | beam.WindowInto(window.FixedWindows(120),
                              trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(60),
                                                             late=trigger.AfterCount(1)),
                              accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                              allowed_lateness=600)
            | "Sum" >> beam.CombinePerKey(sum))


def _rows(table, kind):
    return [r for r in table.to_pylist() if r["kind"] == kind]


def test_the_recorded_panes_are_the_panes_the_step_emitted(make_pipeline, journal, tmp_path):
    rec = str(tmp_path / "rec")
    with make_pipeline(record_panes=rec, streaming=True) as p:
        _ = _streaming_sums(p, paper_stream()) | beam.ParDo(JournalPane(journal))
    assert recorded_steps(rec) == ["Sum"]
    table = read_panes(rec, "Sum")
    emitted = sorted(tuple(e) for e in journal.read())
    recorded = sorted((r["key"], int(r["value"]), r["window_start_us"], r["timing"], r["pane_index"])
                      for r in _rows(table, "pane"))
    assert recorded == emitted and len(emitted) > 2
    # every input, at its event time and the processing time it arrived at
    assert sorted((int(r["value"]), r["event_time_us"] // 10**6, r["processing_time_us"] // 10**6)
                  for r in _rows(table, "element")) == sorted(PAPER)
    # the watermark as each writer's core was told it, never going back
    marks = {}
    for r in _rows(table, "watermark"):
        marks.setdefault(r["writer"], []).append(r["watermark_us"])
    assert marks and all(m == sorted(m) for m in marks.values())
    # the output watermark as the runner moved it: never going back, never ahead of the input's
    outs = {}
    for r in _rows(table, "output_watermark"):
        outs.setdefault(r["writer"], []).append(r["watermark_us"])
    assert outs and all(m == sorted(m) for m in outs.values())
    assert max(max(m) for m in outs.values()) <= max(max(m) for m in marks.values())


def test_a_late_element_past_the_allowed_lateness_is_recorded_as_dropped(make_pipeline, tmp_path):
    rec = str(tmp_path / "rec")
    stream = (TestStream().advance_watermark_to(0)
              .add_elements([window.TimestampedValue(("k", 1), 10)])
              .advance_watermark_to(300)
              .add_elements([window.TimestampedValue(("k", 2), 20)])
              .advance_watermark_to_infinity())
    with make_pipeline(record_panes=rec, streaming=True) as p:
        out = (p | stream | beam.WindowInto(window.FixedWindows(60), allowed_lateness=0)
               | "Group" >> beam.GroupByKey() | beam.MapTuple(lambda k, vs: sorted(vs)))
        assert_that(out, equal_to([[1]]))
    table = read_panes(rec, "Group")
    assert [(r["value"], r["reason"]) for r in _rows(table, "dropped")] == [("2", "late")]
    assert [r["value"] for r in _rows(table, "pane")] == ["[1]"]


def test_bounded_pipelines_are_recorded_too_and_sampling_keeps_the_keys_asked_for(make_pipeline,
                                                                                  tmp_path):
    rec = str(tmp_path / "rec")
    data = [(f"k{i % 4}", i, i * 7) for i in range(40)]
    with make_pipeline(record_panes=rec, record_panes_keys=["k1"], record_panes_steps=["Sum"]) as p:
        stamped = (p | beam.Create(data)
                   | beam.Map(lambda t: window.TimestampedValue((t[0], t[1]), t[2])))
        sums = stamped | beam.WindowInto(window.FixedWindows(100)) | "Sum" >> beam.CombinePerKey(sum)
        _ = stamped | "Other" >> beam.GroupByKey()
        expected = {}
        for k, v, t in data:
            if k == "k1":
                expected[t // 100 * 100] = expected.get(t // 100 * 100, 0) + v
        assert_that(sums | beam.Filter(lambda kv: kv[0] == "k1") | beam.Values(),
                    equal_to(list(expected.values())))
    assert recorded_steps(rec) == ["Sum"]
    table = read_panes(rec)
    assert {r["key"] for r in table.to_pylist() if r["key"] is not None} == {"k1"}
    assert sorted((r["window_start_us"] // 10**6, int(r["value"])) for r in _rows(table, "pane")) == \
        sorted(expected.items())
    assert len(_rows(table, "element")) == 10
    with pytest.raises(InvalidArgumentError, match="recorded steps: Sum"):
        read_panes(rec, "Other")


def test_at_most_max_elements_are_recorded_per_writer(tmp_path):
    from headrace.model.reduce import Element
    from headrace.model.window import GlobalWindow
    spec = RecordPanes(str(tmp_path), max_elements=3)
    recorder = spec.recorder("Step")
    recorder.element_rows("k", [Element(i, i, GlobalWindow()) for i in range(10)], 5)
    recorder.close()
    assert [r["value"] for r in read_panes(str(tmp_path), "Step").to_pylist()] == ["0", "1", "2"]
    with pytest.raises(InvalidArgumentError, match="max_elements"):
        RecordPanes(str(tmp_path), max_elements=-1)


def test_the_paper_figures_are_recorded_and_drawn_the_same_on_the_local_runner_and_spark(tmp_path):
    from tests.conftest import RUNNER_CONFIGS, RUNNERS
    if "spark-local" not in RUNNERS:
        pytest.skip("needs the spark-local runner configuration")
    flags = {"LocalRunner": ["--runner=LocalRunner"],
             "spark-local": ["--runner=SparkRunner", "--spark_master=local[2]"]
             + [f"--spark_conf={c}" for c in RUNNER_CONFIGS["spark-local"][1]["spark_conf"]]}
    rows, svgs = {}, {}
    for name, options in flags.items():
        rec = str(tmp_path / name)
        figures = paper_figures.run(rec, options)
        assert sorted(recorded_steps(rec)) == sorted(paper_figures.step_label(f) for f in figures)
        rows[name] = sorted(
            tuple((k, v) for k, v in r.items() if k not in ("writer", "seq"))
            for r in read_panes(rec).to_pylist()
            # (the output watermark moves when each runner moves it: Spark's once a micro-batch)
            if r["kind"] != "output_watermark"
            and (r["kind"] != "watermark" or r["watermark_us"] < 10**15))   # (+inf: end of input)
        svgs[name] = [diagram.svg_text(diagram.draw(rec, paper_figures.step_label(f), "k"))
                      for f in figures]
    assert rows["LocalRunner"] == rows["spark-local"]
    assert sum(("kind", "pane") in r for r in rows["LocalRunner"]) >= 6 * 3
    assert svgs["LocalRunner"] == svgs["spark-local"]   # every figure's diagram, to the byte


def test_a_diagram_shows_every_pane_element_and_dropped_element(tmp_path):
    rec = str(tmp_path / "rec")
    with beam.Pipeline(options=PipelineOptions(runner="LocalRunner", streaming=True,
                                               record_panes=rec)) as p:
        _ = _streaming_sums(p, paper_stream())
    data = diagram.panes_of(rec, "Sum")
    svg = diagram.svg_text(diagram.draw(rec, "Sum"))
    assert data["key"] == "k" and "Sum, key k" in svg
    assert len(data["element"]) == len(PAPER)
    for pane in data["pane"]:
        assert f"{pane['value']} ({pane['timing']})" in svg
    assert {p["timing"] for p in data["pane"]} == {"EARLY", "ON_TIME", "LATE"}
    # a key that was not recorded, a step that was not, a file type it cannot write
    with pytest.raises(InvalidArgumentError, match="recorded keys: k"):
        diagram.draw(rec, "Sum", "nope")
    with pytest.raises(InvalidArgumentError, match="use a .svg, .png or .html"):
        diagram.draw(rec, "Sum", output=str(tmp_path / "d.pdf"))
    out = tmp_path / "d.html"
    assert cli.main(["diagram", rec, "--step", "Sum", "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>") and "<svg" in out.read_text()
    tips = re.findall(r"<title>([^<]*)</title>", out.read_text())   # hover texts
    assert sum(t.startswith("element ") for t in tips) == len(_rows(read_panes(rec, "Sum"), "element"))
    assert any(" pane 0 of window " in t for t in tips)
    assert cli.main(["diagram", rec, "-o", str(tmp_path / "d.png")]) == 0   # the only step
    assert (tmp_path / "d.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert cli.main(["diagram", rec, "--step", "Other"]) == 2
