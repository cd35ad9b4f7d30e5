"""The SDK package's names load on first use: each is the object its module defines, and importing one module of
the package (as the broker does) loads none of the SDK's clients."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import raftbus.client as sdk


def test_every_public_name_is_its_modules_object():
    for name, module in sdk._MODULE_OF.items():
        assert getattr(sdk, name) is getattr(importlib.import_module(module), name), name
    assert sdk.errors is importlib.import_module("raftbus.client.errors")
    assert set(sdk.__all__) <= set(dir(sdk))


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NoSuchClient"):
        sdk.NoSuchClient  # noqa: B018


def test_star_import_gives_every_public_name():
    scope: dict = {}
    exec("from raftbus.client import *", scope)
    assert set(sdk.__all__) <= set(scope)


def test_the_errors_module_is_an_attribute_of_a_freshly_imported_package():
    code = "import raftbus.client as sdk; print(sdk.errors.RaftbusError.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == "RaftbusError", done.stderr


def test_one_module_of_the_package_loads_no_client():
    code = ("import sys, raftbus.client.errors, raftbus.client.records; "
            "print(sorted(m for m in sys.modules if m.startswith('raftbus.client.')))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for client in ("admin", "producer", "reader", "consumer", "table", "queues.consumer", "groups.fetcher"):
        assert f"'raftbus.client.{client}'" not in loaded, client
