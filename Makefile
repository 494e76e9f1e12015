# The two commands of the README: `make demo` (the lab's main job) and `make test` (the suite).
# Both create .venv on first use; nothing else needs to be installed by hand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.chaoslab-installed

.PHONY: demo test lint format bench lab clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing chaoslab and its dependencies into $(VENV) (once; about two minutes)"
	$(BIN)/python -m pip install --quiet --quiet -e '.[dev]'
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (chaoslab)" >/dev/null
	@touch $@

# Apache Kafka's broker jars, fetched once with Maven into .chaoslab/jars (a no-op after that).
.PHONY: jars
jars: $(STAMP)
	@$(BIN)/chaoslab fetch

demo: $(STAMP) jars
	$(BIN)/chaoslab demo

# The JupyterLab screenshot test opens a notebook in Debian's Chromium, driven by Playwright (which
# would otherwise download a browser of its own, which these machines cannot). Installed once, on
# Debian as root; elsewhere install chromium yourself (the test says what it misses).
CHROMIUM_STAMP := $(VENV)/.chromium-installed
$(CHROMIUM_STAMP):
	@if [ -x /usr/lib/chromium/chromium ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's chromium for the browser test (once; about two minutes)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else echo "note: no Debian chromium and no way to install it here; the screenshot test will skip"; fi
	@mkdir -p $(VENV) && touch $@

# Two workers: the suite waits on servers (group joins, fault windows, JVM start-up) far more
# than it computes, and every scenario test has its own environment. Tests that start Spark
# share one worker (xdist_group "spark", see tests/support.py; pytest is kept below 9.2 for it,
# pyproject.toml says why, tests/test_grouping.py checks it).
test: $(STAMP) jars $(CHROMIUM_STAMP) lint
	$(BIN)/python -m pytest -n 2 --dist loadgroup

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy harness tests

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) jars
	$(BIN)/python tests/benchmarks/bench_startup.py
	$(BIN)/python tests/benchmarks/bench_checker.py
	$(BIN)/python tests/benchmarks/bench_runtimes.py
	$(BIN)/python tests/benchmarks/bench_mongo_writes.py

lab: $(STAMP) jars
	$(BIN)/jupyter lab --ip 127.0.0.1 --notebook-dir notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

clean:
	rm -rf $(VENV) .chaoslab .pytest_cache .ruff_cache .mypy_cache
