"""User metrics (Beam's `apache_beam.metrics`)."""

from headrace.metrics.metric import (
    Counter, Distribution, DistributionData, Gauge, GaugeData, MetricKey, MetricName,
    MetricResult, MetricResults, Metrics, MetricsFilter,
)

__all__ = ["Counter", "Distribution", "DistributionData", "Gauge", "GaugeData", "MetricKey",
           "MetricName", "MetricResult", "MetricResults", "Metrics", "MetricsFilter"]
