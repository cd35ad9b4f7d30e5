"""Spark tier: the windowed-count pipeline in docs/examples reads a topic, aggregates with a watermark and
writes every closed window once to another topic through the raftbus sink."""
from __future__ import annotations

import importlib.util
from pathlib import Path

from tests.spark.support import QUERY_TIMEOUT_S

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "spark_windowed_counts.py"


def load_example():
    spec = importlib.util.spec_from_file_location("spark_windowed_counts", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_writes_each_closed_window_once(spark, spark_cluster, tmp_path):
    """After one availableNow run, the counts topic holds one record per page and closed minute with the
    number of views produced there, and nothing for the window the watermark has not passed."""
    example = load_example()
    example.create_topics(spark_cluster.bootstrap, "example-views", "example-view-counts")
    example.produce_sample_views(spark_cluster.bootstrap, "example-views")
    query = example.start_counts(spark, spark_cluster.bootstrap, "example-views", "example-view-counts",
                                 str(tmp_path / "checkpoint"), available_now=True)
    assert query.awaitTermination(QUERY_TIMEOUT_S)
    assert query.exception() is None
    written = example.read_counts(spark_cluster.bootstrap, "example-view-counts")
    assert sorted(((c["page"], c["window_start"]), c["views"]) for c in written) == sorted(
        example.sample_counts().items())
