"""Goal: register(spark) finds out, before any task runs, that Spark's Python workers would run an interpreter
without raftbus, and says what to set."""
import stat
import sys

import pytest

from raftbus.client.errors import SparkSetupError
from raftbus.client.spark.workers import check_interpreter, worker_python


def wrapper(tmp_path, name: str, *flags: str) -> str:
    """An executable that runs this interpreter with `flags` (-I -S: no site-packages, so no raftbus)."""
    path = tmp_path / name
    path.write_text(f'#!/bin/sh\nexec {sys.executable} {" ".join(flags)} "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_the_conf_wins_over_the_environment_which_wins_over_python3():
    assert worker_python({"spark.pyspark.python": "/c/python"}, {"PYSPARK_PYTHON": "/e/python"}) == (
        "/c/python", "the Spark conf spark.pyspark.python")
    assert worker_python({}, {"PYSPARK_PYTHON": "/e/python"})[0] == "/e/python"
    assert worker_python({}, {})[0] == "python3"


def test_an_interpreter_without_raftbus_is_refused_with_what_to_set(tmp_path):
    bare = wrapper(tmp_path, "bare-python", "-I", "-S")
    with pytest.raises(SparkSetupError) as caught:
        check_interpreter(bare, "the environment variable PYSPARK_PYTHON")
    message = caught.value.message
    assert f"run {bare!r} (the environment variable PYSPARK_PYTHON)" in message
    assert "No module named 'raftbus'" in message
    assert f"Set PYSPARK_PYTHON={sys.executable}" in message and "spark.pyspark.python" in message


def test_a_missing_interpreter_is_refused(tmp_path):
    with pytest.raises(SparkSetupError, match="cannot be started"):
        check_interpreter(str(tmp_path / "no-such-python"), "the Spark conf spark.pyspark.python")


def test_an_interpreter_that_imports_raftbus_passes(tmp_path):
    """Another path to an interpreter with raftbus (here: this one behind a wrapper, really started)."""
    check_interpreter(wrapper(tmp_path, "same-python"), "the environment variable PYSPARK_PYTHON")


def test_py_files_reach_the_checked_interpreter(tmp_path):
    """A raftbus package shipped with --py-files (spark.submit.pyFiles) counts: the interpreter without
    site-packages finds it there, and not without it."""
    bare = wrapper(tmp_path, "bare-python", "-S")
    shipped = tmp_path / "shipped"
    (shipped / "raftbus" / "client").mkdir(parents=True)
    (shipped / "raftbus" / "__init__.py").write_text("")
    (shipped / "raftbus" / "client" / "__init__.py").write_text("")
    with pytest.raises(SparkSetupError):
        check_interpreter(bare, "the environment variable PYSPARK_PYTHON")
    check_interpreter(bare, "the environment variable PYSPARK_PYTHON", py_files=f"{tmp_path / 'x.zip'},{shipped}")
