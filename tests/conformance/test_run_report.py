"""The run report (`--report=DIR`): its data (report.json) and page (index.html) after a batch run
on every runner; `headrace report DIR` renders it again."""

import json
import re

import pytest

import headrace as beam
from headrace import cli

WORDS = ["3", "1", "x", "4", "1", "5", "y", "2", "6", "5", "z", "8"]


def _report(path):
    with open(path / "report.json", encoding="utf-8") as fh:
        return json.load(fh)


def _edge_counts(report):
    """{(producer label, reader label): elements} for each edge whose count the page shows."""
    labels = {n["id"]: n["label"] for n in report["graph"]["nodes"]}
    counts = report["summary"]["counts"]
    return {(labels[e["src"]], labels[e["dst"]]): counts.get("\x00".join(e["count"]))
            for e in report["graph"]["edges"] if e["count"]}


def test_the_report_counts_each_edge_and_the_dead_letters(make_pipeline, tmp_path):
    out = tmp_path / "report"
    with make_pipeline(report=str(out)) as p:
        good, bad = (p | beam.Create(WORDS)
                     | "Parse" >> beam.Map(int).with_exception_handling())
        _ = (good | "Parity" >> beam.Map(lambda v: (v % 2, v))
             | "Sum" >> beam.CombinePerKey(sum)
             | "Show" >> beam.Map(str))
        _ = bad | "Errors" >> beam.Map(lambda b: b[0])
    numbers = [int(w) for w in WORDS if w.isdigit()]
    report = _report(out)
    assert report["run"]["state"] == "DONE"
    edges = _edge_counts(report)
    assert edges[("Create", "Parse")] == len(WORDS)
    assert edges[("Parse", "Parity")] == len(numbers)
    assert edges[("Parse", "Errors")] == len(WORDS) - len(numbers)
    assert edges[("Parity", "Sum")] == len(numbers)
    assert edges[("Sum", "Show")] == len({v % 2 for v in numbers})
    dead = report["summary"]["dead_letters"]["Parse"]
    assert dead["count"] == len(WORDS) - len(numbers)
    assert dead["sample"].startswith("ValueError") and "element '" in dead["sample"]
    stages = {n["label"]: n["stage"] for n in report["graph"]["nodes"]}
    assert stages["Parse"] == stages["Parity"] == stages["Errors"] is not None   # fused
    assert stages["Sum"] is None and stages["Show"] not in (None, stages["Parse"])
    page = (out / "index.html").read_text(encoding="utf-8")
    assert len(re.findall(r'<g class="hr-node', page)) == len(report["graph"]["nodes"])
    assert f">{len(WORDS)}<" in page and "ValueError" in page


def test_a_failed_run_reports_its_error(make_pipeline, tmp_path):
    out = tmp_path / "report"

    def boom(v):
        raise RuntimeError(f"no {v}")
    with pytest.raises(Exception):
        with make_pipeline(report=str(out), max_bundle_attempts=1) as p:
            _ = p | beam.Create([1, 2]) | "Boom" >> beam.Map(boom)
    report = _report(out)
    assert report["run"]["state"] == "FAILED"
    assert "RuntimeError" in report["run"]["error"] and "Boom" in report["run"]["error"]


def test_headrace_report_renders_the_page_again(tmp_path, capsys):
    out = tmp_path / "report"
    with beam.Pipeline(options=beam.options.pipeline_options.PipelineOptions(
            [f"--report={out}"])) as p:
        _ = p | beam.Create([1, 2, 3]) | "Double" >> beam.Map(lambda v: v * 2)
    (out / "index.html").unlink()
    assert cli.main(["report", str(out), "--no-open"]) == 0
    assert "Double" in (out / "index.html").read_text(encoding="utf-8")
    assert cli.main(["report", str(tmp_path / "nothing"), "--no-open"]) == 2
    assert "--report=" in capsys.readouterr().out


def test_the_rate_plot_shows_records_read_when_the_run_counted_them_else_input_rows():
    from headrace.report.page import plots, rate_series

    def batch(n, records):
        return {"batch": n, "time": None, "rows": 2, "rows_per_second": 4.0, "duration_s": 0.5,
                "watermarks": {}, "source_watermarks": {"Read": {"output_us": 10**6 * n,
                                                                 "output_lag_s": 3.0}},
                "late_dropped": 0, "records_read": records, "state_rows": 0}

    counted = plots([batch(0, 100), batch(1, 300)])
    assert "records read per second" in counted[0] and "600" in counted[0]   # 300 in 0.5 s
    assert any("watermark lag" in p for p in counted)   # the source's watermark lag
    assert "input rows per second" in plots([batch(0, None), batch(1, None)])[0]
    # a batch whose count is unknown (its driver state dropped) is left out, not drawn as 0
    title, _, [(_, xs, ys)] = rate_series([batch(0, None), batch(1, 300), batch(2, 50)])
    assert title == "records read per second" and (xs, ys) == ([1.0, 2.0], [600.0, 100.0])
