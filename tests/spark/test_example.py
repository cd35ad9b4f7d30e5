"""Spark tier: the example pipeline in docs/examples runs against a real cluster and adds up right."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from tests.spark.support import QUERY_TIMEOUT_S

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "spark_to_parquet.py"


def load_example():
    spec = importlib.util.spec_from_file_location("spark_to_parquet", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_streams_a_topic_into_parquet_and_aggregates_it(spark, spark_cluster, tmp_path):
    """docs/examples/spark_to_parquet.py writes every sample order to parquet once, across two runs on one
    checkpoint, and its aggregation gives the per-user totals of what was produced."""
    example = load_example()
    out, checkpoint = str(tmp_path / "parquet"), str(tmp_path / "checkpoint")
    for produced in (70, 35):
        example.produce_sample_orders(spark_cluster.bootstrap, "example-orders", produced)
        query = example.start_stream(spark, spark_cluster.bootstrap, "example-orders", out, checkpoint,
                                     available_now=True)
        assert query.awaitTermination(QUERY_TIMEOUT_S)
    written = spark.read.parquet(out)
    assert written.count() == 105
    assert written.select("partition", "offset").distinct().count() == 105
    expected: dict[str, list[int]] = {}
    for i in list(range(70)) + list(range(35)):
        totals = expected.setdefault(f"user-{i % 5}", [0, 0])
        totals[0] += 1
        totals[1] += i % 7 + 1
    rows = example.totals_by_user(spark, out).collect()
    assert {r["user"]: [r["orders"], r["amount"]] for r in rows} == expected
    assert json.loads(written.first()["value"]).keys() == {"user", "amount"}
