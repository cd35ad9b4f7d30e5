"""Fixtures for the Spark tier: ONE local[2] SparkSession for the whole run and ONE real 3-broker cluster.

Each costs seconds to start, so the session lives for the run and the cluster for this package (its
brokers stop before the other tiers go on); every test uses its own topics, so tests do not see each
other's records. Brokers check retention every 200 ms so trimmed topics appear quickly.
"""
from __future__ import annotations

import os
import sys

import pytest

from tests.system.conftest import running_cluster

RETENTION_CHECK_INTERVAL_MS = 200


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(pytest.mark.spark)


@pytest.fixture(scope="package")
def spark_cluster(tmp_path_factory):
    env = {"RAFTBUS_RETENTION_CHECK_INTERVAL_MS": str(RETENTION_CHECK_INTERVAL_MS)}
    with running_cluster(tmp_path_factory.mktemp("spark-cluster"), env=env) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark():
    """local[2] on loopback, no UI, two shuffle partitions; Python workers run this interpreter."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from raftbus.client import spark as raftbus_spark

    session = (SparkSession.builder.master("local[2]").appName("raftbus-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.driver.host", "127.0.0.1")
               .config("spark.driver.bindAddress", "127.0.0.1")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.streaming.pollingDelay", "50ms")
               .config("spark.sql.streaming.noDataProgressEventInterval", "100ms")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    raftbus_spark.register(session)
    try:
        yield session
    finally:
        session.stop()
