"""User metrics: `Metrics.counter / distribution / gauge`, committed per successful bundle."""

from __future__ import annotations

import time
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from headrace.errors import InvalidArgumentError


class MetricName(NamedTuple):
    """A metric's namespace and name."""

    namespace: str
    name: str


class MetricKey(NamedTuple):
    """A metric as reported: the step it was updated in and its name."""

    step: str
    metric: MetricName


class DistributionData(NamedTuple):
    """Sum, count, min and max of the values a distribution saw."""

    sum: float
    count: int  # type: ignore[assignment]  # Beam's field name; it shadows tuple.count
    min: float
    max: float

    @property
    def mean(self) -> Optional[float]:
        """The mean of the values, or None if there were none."""
        return self.sum / self.count if self.count else None

    def combine(self, other: "DistributionData") -> "DistributionData":
        """Both distributions together."""
        if not self.count:
            return other
        if not other.count:
            return self
        return DistributionData(self.sum + other.sum, self.count + other.count,
                                min(self.min, other.min), max(self.max, other.max))


class GaugeData(NamedTuple):
    """The last value a gauge was set to and when."""

    value: Any
    timestamp: float

    def combine(self, other: "GaugeData") -> "GaugeData":
        """The later of the two settings."""
        return other if other.timestamp >= self.timestamp else self


class MetricResult(NamedTuple):
    """A metric's committed value (successful bundles) and attempted value (all attempts)."""

    key: MetricKey
    committed: Any
    attempted: Any

    @property
    def result(self) -> Any:
        """The committed value."""
        return self.committed


class MetricsContainer:
    """Metric updates of one bundle attempt, keyed by (kind, step, namespace, name)."""

    def __init__(self) -> None:
        self.cells: Dict[Tuple[str, str, str, str], Any] = {}

    def update(self, kind: str, step: str, namespace: str, name: str, value: Any) -> None:
        """Adds one update of a counter, distribution or gauge."""
        key = (kind, step, namespace, name)
        old = self.cells.get(key)
        if kind == "counter":
            self.cells[key] = (old or 0) + value
        elif kind == "distribution":
            d = DistributionData(value, 1, value, value)
            self.cells[key] = d if old is None else old.combine(d)
        else:
            self.cells[key] = GaugeData(value, time.time())

    def merge(self, other: "MetricsContainer") -> None:
        """Adds all updates of `other` to this container."""
        for key, v in other.cells.items():
            old = self.cells.get(key)
            if old is None:
                self.cells[key] = v
            elif key[0] == "counter":
                self.cells[key] = old + v
            else:
                self.cells[key] = old.combine(v)


class _Current:
    """Where metric updates go right now: a container and the step they are attributed to.

    Runners execute one bundle at a time per Python process (the local runner, and each
    Spark Python worker), so this is process-wide state set around user code.
    """

    __slots__ = ("container", "step")

    def __init__(self) -> None:
        self.container: Optional[MetricsContainer] = None
        self.step = ""


CURRENT = _Current()


class _Scope:
    """Sets the container and step that metric updates go to (used by runners around user code)."""

    __slots__ = ("container", "step", "_prev")

    def __init__(self, container: Optional[MetricsContainer], step: str) -> None:
        self.container, self.step = container, step

    def __enter__(self) -> "_Scope":
        self._prev = (CURRENT.container, CURRENT.step)
        CURRENT.container, CURRENT.step = self.container, self.step
        return self

    def __exit__(self, *exc: Any) -> None:
        CURRENT.container, CURRENT.step = self._prev


def metrics_scope(container: Optional[MetricsContainer], step: str) -> _Scope:
    """A context manager routing metric updates to `container`, attributed to `step`."""
    return _Scope(container, step)


def set_current_step(step: str) -> None:
    """Changes the step that updates in the current scope are attributed to."""
    CURRENT.step = step


def _update(kind: str, namespace: str, name: str, value: Any) -> None:
    container = CURRENT.container
    if container is None:
        return  # outside a running step (e.g. at construction): nothing to attribute it to
    container.update(kind, CURRENT.step, namespace, name, value)


def _check_name(namespace: Any, name: Any) -> Tuple[str, str]:
    if isinstance(namespace, type):
        namespace = f"{namespace.__module__}.{namespace.__name__}"  # as Beam; survives pickling
    if not isinstance(namespace, str) or not namespace:
        raise InvalidArgumentError(
            f"a metric namespace must be a non-empty str or a class, got {namespace!r}")
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"a metric name must be a non-empty str, got {name!r}")
    return namespace, name


class Counter:
    """A metric that sums increments."""

    def __init__(self, namespace: str, name: str) -> None:
        self.metric_name = MetricName(namespace, name)

    def inc(self, n: int = 1) -> None:
        """Adds `n`."""
        _update("counter", self.metric_name.namespace, self.metric_name.name, n)

    def dec(self, n: int = 1) -> None:
        """Subtracts `n`."""
        self.inc(-n)


class Distribution:
    """A metric that records sum, count, min and max of values."""

    def __init__(self, namespace: str, name: str) -> None:
        self.metric_name = MetricName(namespace, name)

    def update(self, value: Any) -> None:
        """Records one value."""
        _update("distribution", self.metric_name.namespace, self.metric_name.name, value)


class Gauge:
    """A metric that keeps the latest value set."""

    def __init__(self, namespace: str, name: str) -> None:
        self.metric_name = MetricName(namespace, name)

    def set(self, value: Any) -> None:
        """Sets the current value."""
        _update("gauge", self.metric_name.namespace, self.metric_name.name, value)


class Metrics:
    """Factory of user metrics, as in Beam: `Metrics.counter(namespace, name)`."""

    @staticmethod
    def counter(namespace: Any, name: str) -> Counter:
        """A counter metric."""
        return Counter(*_check_name(namespace, name))

    @staticmethod
    def distribution(namespace: Any, name: str) -> Distribution:
        """A distribution metric."""
        return Distribution(*_check_name(namespace, name))

    @staticmethod
    def gauge(namespace: Any, name: str) -> Gauge:
        """A gauge metric."""
        return Gauge(*_check_name(namespace, name))


class MetricsFilter:
    """Selects metrics by name, namespace and step for `MetricResults.query`."""

    def __init__(self) -> None:
        self.names: set = set()
        self.namespaces: set = set()
        self.steps: set = set()

    def with_name(self, name: str) -> "MetricsFilter":
        """Keeps metrics with this name."""
        self.names.add(name)
        return self

    def with_names(self, names: List[str]) -> "MetricsFilter":
        """Keeps metrics with any of these names."""
        self.names.update(names)
        return self

    def with_namespace(self, namespace: Any) -> "MetricsFilter":
        """Keeps metrics in this namespace (a str or a class)."""
        if isinstance(namespace, type):
            namespace = f"{namespace.__module__}.{namespace.__name__}"  # as Beam; survives pickling
        self.namespaces.add(namespace)
        return self

    def with_namespaces(self, namespaces: List[Any]) -> "MetricsFilter":
        """Keeps metrics in any of these namespaces."""
        for n in namespaces:
            self.with_namespace(n)
        return self

    def with_step(self, step: str) -> "MetricsFilter":
        """Keeps metrics updated in this step (full label, or a label inside it)."""
        self.steps.add(step)
        return self

    def with_metric(self, metric: Any) -> "MetricsFilter":
        """Keeps the metric of this Counter / Distribution / Gauge."""
        return self.with_namespace(metric.metric_name.namespace).with_name(metric.metric_name.name)

    def matches(self, key: MetricKey) -> bool:
        """True when `key` passes this filter."""
        if self.names and key.metric.name not in self.names:
            return False
        if self.namespaces and key.metric.namespace not in self.namespaces:
            return False
        if self.steps and not any(s == key.step or s in key.step.split("/") or
                                  key.step.startswith(s + "/") for s in self.steps):
            return False
        return True


class MetricResults:
    """All metrics of a run; `query(filter)` returns counters, distributions and gauges."""

    def __init__(self, committed: MetricsContainer, attempted: MetricsContainer) -> None:
        self._committed = committed
        self._attempted = attempted

    def query(self, filter: Optional[MetricsFilter] = None) -> Dict[str, List[MetricResult]]:
        """Returns {'counters': [...], 'distributions': [...], 'gauges': [...]} of MetricResults."""
        out: Dict[str, List[MetricResult]] = {"counters": [], "distributions": [], "gauges": []}
        for key in sorted(set(self._committed.cells) | set(self._attempted.cells), key=str):
            kind, step, ns, name = key
            mk = MetricKey(step, MetricName(ns, name))
            if filter is not None and not filter.matches(mk):
                continue
            committed = self._committed.cells.get(key, _zero(kind))
            attempted = self._attempted.cells.get(key, _zero(kind))
            out[kind + "s"].append(MetricResult(mk, committed, attempted))
        return out


def _zero(kind: str) -> Any:
    if kind == "counter":
        return 0
    if kind == "distribution":
        return DistributionData(0, 0, 0, 0)
    return GaugeData(None, 0.0)
