# raftbus — every target sets itself up: a fresh machine needs only Python 3.11+, make and (for Spark) Java 17.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
STAMP  := $(VENV)/.installed
PEERS_STAMP := $(VENV)/.peers-installed
# Debian packages (each ships the binary of the same name) and extra flags for `make bench-peers`,
# e.g. `make bench-peers PEERS_ARGS="--records 100000"`.
PEERS_SERVERS := nats-server redis-server
PEERS_ARGS ?=
# Debian packages of the headless browser the dashboard test drives (binary -> package).
BROWSER_PACKAGES := chromium:chromium chromedriver:chromium-driver
# Debian packages of the Kafka tools the kafka tier drives (binary -> package).
KAFKA_TOOL_PACKAGES := kcat:kcat
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Python processes started here keep their compiled bytecode (__pycache__, ignored by git) even where the
# environment asks not to write it (PYTHONDONTWRITEBYTECODE): a test run starts hundreds of broker processes, each of
# which would otherwise compile raftbus's modules from source again, and pytest would rewrite the asserts of every
# test module again in every worker (README, Tests).
unexport PYTHONDONTWRITEBYTECODE

# The test tiers, one folder each under tests/ (README, "Tests"). `make test` runs them all: every tier but Spark in
# one parallel run that stops at the first failure and, beside it, the Spark tier. Workers are pytest-xdist processes;
# most of a broker test's time is spent waiting on other processes and timers, so there are more of them than cores,
# and `--dist loadgroup` keeps tests that share a module's cluster on one worker (tests/conftest.py). The Spark tier
# is one local[2] session whose Python workers must connect back to the JVM within Spark's fixed 10 s, so the
# parallel run gives way to it: it runs at nice $(TEST_NICE), the Spark tier at the caller's priority (its output is
# printed when both are done). `make test-<tier>` runs one tier: in parallel, but for the tiers that take less time
# than starting the workers would (SERIAL_TIERS).
TIERS := unit component cluster system chaos spark deploy kafka docs
SERIAL_TIERS := component deploy spark docs
TEST_WORKERS ?= 4
TEST_NICE ?= 10
PYTEST := $(PY) -m pytest -q -x -p no:cacheprovider
PYTEST_PARALLEL := $(PYTEST) -n $(TEST_WORKERS) --dist loadgroup

.PHONY: run test test-fast $(addprefix test-,$(TIERS)) bench bench-peers peers-servers browser kafka-tools proto \
        proto-check defaults clean

$(STAMP): pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test,spark,http]'
	touch $(STAMP)

install: $(STAMP)

# A local 3-broker cluster on loopback with a short demo; Ctrl-C stops it.
run: $(STAMP)
	$(VENV)/bin/raftbus dev --brokers 3 --data-dir ./data --demo

test: $(STAMP) proto-check browser kafka-tools
	@spark_log=$$(mktemp); echo "$(PYTEST) tests/spark > $$spark_log (beside the parallel run)"; \
	$(PYTEST) tests/spark > $$spark_log 2>&1 & spark=$$!; \
	echo "nice -n $(TEST_NICE) $(PYTEST_PARALLEL) --ignore=tests/spark tests"; \
	nice -n $(TEST_NICE) $(PYTEST_PARALLEL) --ignore=tests/spark tests; rest=$$?; \
	wait $$spark; spark_rc=$$?; echo "--- the Spark tier:"; cat $$spark_log; rm -f $$spark_log; \
	[ $$rest -eq 0 ] && [ $$spark_rc -eq 0 ]

test-fast: test-unit test-component

# test-system needs the browser of the dashboard test; test-kafka (the real Kafka clients and kcat against real
# brokers' Kafka ports, docs/kafka.md) the Kafka tools, and so does test-docs (the README's kcat examples; the
# fenced examples of README.md and docs/*.md run against one `raftbus dev` cluster, tests/doc_examples.py).
test-system: browser
test-kafka test-docs: kafka-tools
$(addprefix test-,$(filter-out $(SERIAL_TIERS),$(TIERS))): test-%: $(STAMP)
	@if [ -d tests/$* ]; then echo "$(PYTEST_PARALLEL) tests/$*"; $(PYTEST_PARALLEL) tests/$*; \
	else echo "tests/$* has no tests yet"; fi

$(addprefix test-,$(SERIAL_TIERS)): test-%: $(STAMP)
	$(PYTEST) tests/$*

bench: $(STAMP)
	$(VENV)/bin/raftbus bench all --out bench-results.json --table-out bench-results.md

# raftbus (`raftbus bench all`), a 3-node NATS JetStream R3 cluster and a Redis server, same records and counts,
# side by side in one run: JSON lines, bench-peers.json and the Markdown table (also in bench-peers.md).
bench-peers: $(PEERS_STAMP) peers-servers
	$(PY) -m raftbus.bench.peers --out bench-peers.json --table-out bench-peers.md $(PEERS_ARGS)

$(PEERS_STAMP): $(STAMP)
	$(PIP) install -q -e '.[test,peers]'
	touch $(PEERS_STAMP)

# Installs nats-server and redis-server from Debian when missing (refreshing the package lists if needed).
peers-servers:
	@missing=""; for bin in $(PEERS_SERVERS); do \
	  command -v $$bin >/dev/null || [ -x /usr/sbin/$$bin ] || missing="$$missing $$bin"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing || \
	  { $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
	fi

# Installs Debian's chromium and chromium-driver when missing: the dashboard's browser test drives them headless.
browser:
	@missing=""; for pair in $(BROWSER_PACKAGES); do \
	  command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing || \
	  { $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
	fi

# Installs Debian's kcat when missing: the kafka tier lists, produces and consumes with it.
kafka-tools:
	@missing=""; for pair in $(KAFKA_TOOL_PACKAGES); do \
	  command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair#*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing$$missing"; \
	  $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing || \
	  { $(SUDO) apt-get update && \
	    $(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $$missing; }; \
	fi

# Regenerate the gRPC modules from every proto/*.proto (they are committed; proto-check fails when they differ).
# Generated modules import each other relatively, so they live in the client package without sys.path hacks.
PROTOS := $(sort $(wildcard proto/*.proto))
PROTOC  = $(PY) -m grpc_tools.protoc -I proto --python_out=$(1) --pyi_out=$(1) --grpc_python_out=$(1) $(PROTOS) && \
          sed -i -E 's/^import (\w+_pb2) as/from . import \1 as/' $(1)/*_pb2*.py $(1)/*_pb2.pyi

proto: $(STAMP)
	$(call PROTOC,client/wire)

proto-check: $(STAMP)
	@tmp=$$(mktemp -d); \
	$(call PROTOC,$$tmp) || exit 1; \
	for f in $$(cd $$tmp && ls); do \
	  cmp -s $$tmp/$$f client/wire/$$f || { echo "client/wire/$$f is stale: run 'make proto'"; exit 1; }; \
	done; \
	for f in $$(cd client/wire && ls *_pb2*); do \
	  [ -e $$tmp/$$f ] || { echo "client/wire/$$f has no proto source: run 'make proto' and remove it"; exit 1; }; \
	done; rm -rf $$tmp

# Write config/defaults.toml from the settings sections in the code (a unit test fails while it differs).
defaults: $(STAMP)
	$(PY) -m raftbus.broker.settings --write-defaults config/defaults.toml

clean:
	rm -rf $(VENV) data bench-results.json bench-results.md bench-peers.json bench-peers.md
