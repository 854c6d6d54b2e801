"""User metrics: counters, distributions and gauges, read through `result.metrics().query()`."""

from __future__ import annotations


import headrace as beam
from headrace.metrics import Metrics
from headrace.metrics.metric import MetricsFilter
from headrace.testing.util import assert_that, equal_to


class MeasureDoFn(beam.DoFn):
    def __init__(self):
        self.elements = Metrics.counter("measure", "elements")
        self.negatives = Metrics.counter("measure", "negatives")
        self.sizes = Metrics.distribution("measure", "sizes")

    def process(self, element):
        self.elements.inc()
        if element < 0:
            self.negatives.inc(2)
            self.negatives.dec()
        self.sizes.update(element)
        yield element


VALUES = [5, -3, 12, 0, 7, -8, 21, 4]


def _only(results):
    assert len(results) == 1, results
    return results[0]


def test_counter(make_pipeline):
    p = make_pipeline(bundle_size=3)
    out = p | beam.Create(VALUES) | "Measure" >> beam.ParDo(MeasureDoFn())
    assert_that(out, equal_to(VALUES))
    result = p.run()
    elements = _only(result.metrics().query(MetricsFilter().with_name("elements"))["counters"])
    assert elements.committed == len(VALUES)
    assert elements.attempted == len(VALUES)
    assert elements.key.metric.namespace == "measure"
    assert elements.key.step == "Measure"
    negatives = _only(result.metrics().query(MetricsFilter().with_name("negatives"))["counters"])
    assert negatives.committed == sum(1 for v in VALUES if v < 0)


def test_distribution(make_pipeline):
    p = make_pipeline(bundle_size=3)
    p | beam.Create(VALUES) | "Measure" >> beam.ParDo(MeasureDoFn())
    result = p.run()
    sizes = _only(result.metrics().query(MetricsFilter().with_name("sizes"))["distributions"])
    d = sizes.committed
    assert (d.sum, d.count, d.min, d.max) == (sum(VALUES), len(VALUES), min(VALUES), max(VALUES))
    assert d.mean == sum(VALUES) / len(VALUES)


def test_gauge(make_pipeline):
    def set_gauge(x):
        Metrics.gauge("measure", "last_size").set(x)
        return x

    p = make_pipeline()
    p | beam.Create([42]) | "Gauge" >> beam.Map(set_gauge)
    result = p.run()
    gauge = _only(result.metrics().query(MetricsFilter().with_name("last_size"))["gauges"])
    assert gauge.committed.value == 42


def test_query_filters_by_namespace_and_step(make_pipeline):
    class Tagged(beam.DoFn):
        def process(self, x):
            Metrics.counter(Tagged, "seen").inc()
            Metrics.counter("other-namespace", "seen").inc(10)
            yield x

    p = make_pipeline()
    pc = p | beam.Create([1, 2, 3])
    pc | "First" >> beam.ParDo(Tagged())
    pc | "Second" >> beam.ParDo(Tagged())
    result = p.run()

    all_seen = result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    assert sorted((c.key.step, c.key.metric.namespace != "other-namespace", c.committed)
                  for c in all_seen) == [("First", False, 30), ("First", True, 3),
                                         ("Second", False, 30), ("Second", True, 3)]
    by_class = result.metrics().query(MetricsFilter().with_namespace(Tagged))["counters"]
    assert sorted((c.key.step, c.committed) for c in by_class) == [("First", 3), ("Second", 3)]
    first = result.metrics().query(MetricsFilter().with_step("First").with_name("seen"))["counters"]
    assert sum(c.committed for c in first) == 33
    assert result.metrics().query(MetricsFilter().with_name("no-such-metric")) == {
        "counters": [], "distributions": [], "gauges": []}


def test_metrics_in_start_and_finish_bundle_and_map(make_pipeline):
    class Bundles(beam.DoFn):
        def start_bundle(self):
            Metrics.counter("b", "starts").inc()

        def process(self, x):
            yield x

        def finish_bundle(self):
            Metrics.counter("b", "finishes").inc()

    p = make_pipeline(bundle_size=2)
    (p | beam.Create(list(range(7))) | beam.ParDo(Bundles())
     | beam.Map(lambda x: Metrics.counter("b", "mapped").inc() or x))
    result = p.run()

    def value(name):
        return _only(result.metrics().query(MetricsFilter().with_name(name))["counters"]).committed

    assert value("mapped") == 7
    assert value("starts") == value("finishes") >= 4  # 7 elements in bundles of at most 2


def _words_then_count(line):
    for word in line.split():
        yield word
        Metrics.counter("attribution", "after_yield").inc()


def test_metric_updated_after_yield_is_attributed_to_the_yielding_step(make_pipeline):
    lines = ["a b c", "d e"]
    p = make_pipeline()
    (p | beam.Create(lines) | "Split" >> beam.FlatMap(_words_then_count)
     | "Upper" >> beam.Map(str.upper))
    result = p.run()
    found = result.metrics().query(MetricsFilter().with_name("after_yield"))["counters"]
    assert [(c.key.step, c.committed) for c in found] == [("Split", len(" ".join(lines).split()))]
