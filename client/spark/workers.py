"""Does Spark run its Python workers on an interpreter that can import raftbus? Checked by register(spark).

Spark starts every task's Python worker with `spark.pyspark.python` if set, else `PYSPARK_PYTHON`, else
`python3`, which is often not the interpreter (a virtualenv's) that runs the driver. Without raftbus there,
the first task fails with `ModuleNotFoundError: No module named 'raftbus'` deep in a Spark trace. For local
masters the workers run on this machine, so register() runs that interpreter once, with the PYTHONPATH the
workers get from `spark.submit.pyFiles`, and raises SparkSetupError saying what to set. Cluster masters run
workers elsewhere; docs/spark.md shows how to ship raftbus to them.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping

from raftbus.client.errors import SparkSetupError

# How long the worker interpreter may take to start and import raftbus.client.
SPARK_WORKER_CHECK_TIMEOUT_MS = 60_000
WORKER_PYTHON_CONF = "spark.pyspark.python"
WORKER_PYTHON_ENV = "PYSPARK_PYTHON"
PY_FILES_CONF = "spark.submit.pyFiles"
_IMPORT = "import raftbus.client"


def worker_python(conf: Mapping[str, str], environ: Mapping[str, str]) -> tuple[str, str]:
    """(interpreter, where it came from) that Spark's Python workers run."""
    if conf.get(WORKER_PYTHON_CONF):
        return conf[WORKER_PYTHON_CONF], f"the Spark conf {WORKER_PYTHON_CONF}"
    if environ.get(WORKER_PYTHON_ENV):
        return environ[WORKER_PYTHON_ENV], f"the environment variable {WORKER_PYTHON_ENV}"
    return "python3", f"Spark's default, as neither {WORKER_PYTHON_CONF} nor {WORKER_PYTHON_ENV} is set"


def is_this_interpreter(python: str) -> bool:
    found = shutil.which(python)
    return found is not None and os.path.abspath(found) == os.path.abspath(sys.executable)


def check_interpreter(python: str, origin: str, py_files: str = "") -> None:
    """SparkSetupError unless `python` imports raftbus (with `py_files`, comma-separated, on its path)."""
    if is_this_interpreter(python):
        return
    env = dict(os.environ)
    paths = [p for p in py_files.split(",") if p] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    try:
        done = subprocess.run([python, "-c", _IMPORT], env=env, capture_output=True, text=True,
                              timeout=SPARK_WORKER_CHECK_TIMEOUT_MS / 1000)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"Spark's Python workers would run {python!r} ({origin}), which cannot be "
                              f"started: {exc}. {_advice(python)}") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["exit code " + str(done.returncode)])[-1]
        raise SparkSetupError(f"Spark's Python workers run {python!r} ({origin}), which cannot import "
                              f"raftbus ({why}). {_advice(python)}")


def _advice(python: str) -> str:
    return (f"Set PYSPARK_PYTHON={sys.executable} (or the Spark conf {WORKER_PYTHON_CONF}) before the "
            f"SparkSession starts, or install 'raftbus[spark]' into {python}.")


def check_local_workers(spark) -> None:
    """For a local master, check that the workers' interpreter imports raftbus (see the module docstring)."""
    context = spark.sparkContext
    if not context.master.startswith("local"):
        return
    conf = dict(context.getConf().getAll())
    python, origin = worker_python(conf, os.environ)
    check_interpreter(python, origin, conf.get(PY_FILES_CONF, ""))
