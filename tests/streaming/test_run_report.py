"""The run report of a streaming run (`--report=DIR`), loaded in a real browser: headless
Chromium (Debian's `chromium` and `chromium-driver`, driven by Selenium) draws its graph and its
micro-batch plots with no console error; the screenshot is kept under benchmarks/artifacts/
(`.ci/run` keeps it as the run's artefact)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import headrace as beam
from headrace.options.pipeline_options import PipelineOptions
from headrace.examples.paper_figures import paper_stream
from headrace.transforms import trigger, window
from tests._browser import browser

ARTIFACTS = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "artifacts")


def _streaming_run(tmp_path):
    """The paper's stream on Spark streaming (spark-local's options), with a report and a
    pane recording."""
    from tests.conftest import RUNNER_CONFIGS
    out, rec = tmp_path / "report", tmp_path / "panes"
    name, extra = RUNNER_CONFIGS["spark-local"]
    p = beam.Pipeline(runner=name, options=PipelineOptions(
        **extra, streaming=True, report=str(out), report_refresh_seconds=0.0,
        record_panes=str(rec), test_stream_events_per_batch=1))
    _ = (p | paper_stream()
         | beam.WindowInto(window.FixedWindows(120),
                           trigger=trigger.AfterWatermark(early=trigger.AfterProcessingTime(60),
                                                          late=trigger.AfterCount(1)),
                           accumulation_mode=trigger.AccumulationMode.ACCUMULATING,
                           allowed_lateness=60)
         | "Sum" >> beam.CombinePerKey(sum)
         | "Format" >> beam.MapTuple(lambda k, v: f"{k}: {v}"))
    p.run().wait_until_finish()
    return out


def test_a_streaming_run_report_draws_in_chromium(tmp_path):
    from tests.conftest import RUNNERS
    if "spark-local" not in RUNNERS:
        pytest.skip("runs on the spark-local runner configuration, not among HEADRACE_TEST_RUNNERS")
    driver = browser()
    try:
        out = _streaming_run(tmp_path)
        with open(out / "report.json", encoding="utf-8") as fh:
            report = json.load(fh)
        assert report["run"]["state"] == "DONE"
        batches = report["batches"]
        assert len(batches) >= 3 and [b["batch"] for b in batches] == sorted({b["batch"] for b in batches})
        assert batches[-1]["late_dropped"] >= 1      # the paper's 9 arrives past the lateness
        assert all(b["records_read"] is None for b in batches)   # (a TestStream: Spark's rows)
        lags = [b["watermarks"]["Sum"] for b in batches if "Sum" in b["watermarks"]]
        assert lags
        # (a watermark at either end of time is left out: the input's at +inf once it ended)
        assert all(m["output_us"] <= m.get("input_us", m["output_us"]) for m in lags if "output_us" in m)
        assert any("input_lag_s" in m for m in lags)
        # the source's own watermark (a TestStream's, behind its script's processing time)
        sources = [b["source_watermarks"] for b in batches if b["source_watermarks"]]
        assert sources and all(set(m) == {"TestStream"} for m in sources)
        assert all(m["TestStream"]["output_lag_s"] >= 0 for m in sources)
        assert report["diagrams"] and report["diagrams"][0]["file"]
        driver.get("file://" + str(out / "index.html"))
        nodes = driver.find_elements("css selector", "svg.hr-graph g.hr-node")
        assert sorted(n.get_attribute("data-step") for n in nodes) == sorted(
            n["label"] for n in report["graph"]["nodes"])
        assert len(driver.find_elements("css selector", "svg.hr-graph g.hr-edge path")) == \
            len(report["graph"]["edges"])
        plots = driver.find_elements("css selector", ".plots .plot svg")
        assert len(plots) == 4
        for plot in plots:   # drawn: a line with points, at a size on the page
            assert plot.size["width"] > 200 and plot.size["height"] > 100
            assert plot.find_elements("css selector", "path")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        assert errors == []
        link = driver.find_element("css selector", "#diagrams + ul a")
        assert (out / link.get_attribute("href").split("/report/", 1)[1]).exists()
        os.makedirs(ARTIFACTS, exist_ok=True)
        shot = os.path.join(ARTIFACTS, "run-report.png")
        driver.save_screenshot(shot)
        shutil.copyfile(out / "index.html", os.path.join(ARTIFACTS, "run-report.html"))
        assert os.path.getsize(shot) > 10_000
    finally:
        driver.quit()
