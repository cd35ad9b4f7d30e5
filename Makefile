# raftbus — every target sets itself up: a fresh machine needs only Python 3.11+, make and (for Spark) Java 17.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed

.PHONY: run test test-fast bench proto proto-check clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# A local 3-broker cluster on loopback with a short demo; Ctrl-C stops it.
run: $(STAMP)
	$(VENV)/bin/raftbus dev --brokers 3 --data-dir ./data --demo

test: $(STAMP) proto-check
	$(PY) -m pytest -q -x -p no:cacheprovider tests

test-fast: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider tests/unit tests/component

bench: $(STAMP)
	$(VENV)/bin/raftbus bench all --out bench-results.json

# Regenerate the gRPC modules from proto/ (they are committed; proto-check fails when they differ).
proto: $(STAMP)
	$(PY) -m grpc_tools.protoc -I proto --python_out=client/wire --pyi_out=client/wire --grpc_python_out=client/wire proto/raftbus.proto
	sed -i 's/^import raftbus_pb2 as/from . import raftbus_pb2 as/' client/wire/raftbus_pb2_grpc.py

proto-check: $(STAMP)
	@tmp=$$(mktemp -d); \
	$(PY) -m grpc_tools.protoc -I proto --python_out=$$tmp --pyi_out=$$tmp --grpc_python_out=$$tmp proto/raftbus.proto; \
	sed -i 's/^import raftbus_pb2 as/from . import raftbus_pb2 as/' $$tmp/raftbus_pb2_grpc.py; \
	for f in raftbus_pb2.py raftbus_pb2.pyi raftbus_pb2_grpc.py; do \
	  cmp -s $$tmp/$$f client/wire/$$f || { echo "client/wire/$$f is stale: run 'make proto'"; exit 1; }; \
	done; rm -rf $$tmp

clean:
	rm -rf $(VENV) data bench-results.json
