# A fresh machine needs only `make test` and `make demo`: both create the
# virtualenv and install the project on first use. Re-installs only when
# pyproject.toml changes (the stamp file below is older than it). The tests and
# the demo need both extras: `dev` (pytest, mypy) and `embedded` (the tansu
# broker, which a production install leaves out).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
PYTEST_ARGS ?=
# e.g. make bench BENCH_ARGS='--records 50000 --rounds 5 --check'
BENCH_ARGS ?=

.PHONY: venv kafka test ts demo typecheck lint format bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded]'
	touch $@

# Apache Kafka (kafka/pom.xml pins the version): Maven fetches its jars into
# .cache/kafka/<version>/libs when they are missing or the pom changed, else
# nothing happens. Needs Java 17+ and Maven; without them it stops with one
# line naming what to install. Prints "== kafka <version> ...".
kafka: $(STAMP)
	$(BIN)/python -m busguard.devtools.kafka fetch

test: $(STAMP) ts kafka
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# better-sqlite3 is built from source (no prebuilt binary is downloaded):
# node-gyp uses the headers of the Node.js that runs npm (<prefix>/include/node),
# never fetching them from nodejs.org.
# The TypeScript package (ts/, issue 39): `npm ci` only when its lock file
# changes (the stamp, as for the venv), then build, lint and its own tests.
# `make test` runs it first: tests/unit/test_ts_vectors.py runs its build.
TS_STAMP := ts/node_modules/.installed

$(TS_STAMP): ts/package-lock.json
	cd ts && npm_config_nodedir="$$(node -p 'require("path").resolve(process.execPath, "../..")')" npm ci --no-audit --no-fund
	touch $@

ts: $(TS_STAMP)
	cd ts && npm run build && npm run lint && npm test

demo: $(STAMP)
	$(BIN)/busguard demo

typecheck: $(STAMP)
	$(BIN)/mypy

# ruff (pyproject.toml [tool.ruff]): `make lint` fails on an unformatted file or
# a lint finding; `make format` rewrites the tree.
lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The `bench` extra (Quix Streams, the stateful stream processor busguard is
# measured against, issue 20) on top of the test install; its own stamp, so
# `make test` never installs it and `make bench` re-installs when
# pyproject.toml changes.
$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded,bench]'
	touch $@

# busguard side by side with bare verify, the aiokafka relay, the
# hand-written guard and the Quix Streams guard, on Apache Kafka (one KRaft
# node; `--broker embedded` for tansu): the throughput rounds, then 200
# records/s, then half of busguard's peak (BENCH_MODE; empty it to run one
# mode from BENCH_ARGS, e.g. BENCH_MODE= BENCH_ARGS='--rate 200').
# Prints every target with its verdict; fails on a missed one only with
# --check. The other benchmarks/*.py run on their own.
BENCH_MODE ?= --suite
bench: $(BENCH_STAMP) kafka
	$(BIN)/python benchmarks/compare.py $(BENCH_MODE) $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .hypothesis .cache/kafka
