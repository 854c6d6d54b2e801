"""The control keys of headrace's streaming queries: one per partition of a stateful operator,
found in Python by Spark's own hash partitioning (`spark_hash`), checked against Spark's."""

from __future__ import annotations

import random

import pytest

from headrace.options.pipeline_options import PipelineOptions
from headrace.runners.spark.streaming.query import partition_keys, spark_hash
from tests.conftest import RUNNER_CONFIGS, RUNNERS

pytestmark = pytest.mark.skipif("spark-local" not in RUNNERS, reason="Spark runners not selected")


@pytest.fixture(scope="module")
def spark():
    from headrace.runners.spark import session as sessions
    name, extra = RUNNER_CONFIGS["spark-local"]
    return sessions.get_session(PipelineOptions(runner=name, **extra))


def test_spark_hash_is_sparks_hash_of_an_int_and_a_binary(spark):
    rng = random.Random(7)
    cases = [(rng.randrange(-2**31, 2**31), bytes(rng.randrange(256) for _ in range(rng.randrange(0, 13))))
             for _ in range(300)]
    values = ", ".join(f"({kind}, X'{key.hex()}')" for kind, key in cases)
    rows = spark.sql(f"SELECT hash(k, b) AS h FROM VALUES {values} AS t(k, b)").collect()
    assert [r.h for r in rows] == [spark_hash(kind, key) for kind, key in cases]


@pytest.mark.parametrize("n", [1, 2, 3, 7, 64, 200])
def test_each_control_key_lands_in_its_own_partition(spark, n):
    keys = partition_keys(n)
    values = ", ".join(f"(X'{k.hex()}')" for k in keys)
    rows = spark.sql(f"SELECT pmod(hash(0, b), {n}) AS p FROM VALUES {values} AS t(b)").collect()
    assert [r.p for r in rows] == list(range(n))
