# The two commands of the README: `make demo` (the lab's main job) and `make test` (the suite).
# Both create .venv on first use; nothing else needs to be installed by hand.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.chaoslab-installed

.PHONY: demo library test lint format bench soak lab clean

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

# The containers backend's engine and image tools: Debian's podman and runc (crun fails on these
# machines' cgroups) and debootstrap (the lab's base image). Installed once, on Debian as root,
# unless a Docker engine answers; elsewhere `chaoslab doctor` says what is missing (the
# containers tests skip, naming it).
CONTAINERS_STAMP := $(VENV)/.containers-tools
$(CONTAINERS_STAMP):
	@if command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null; then :; \
	elif [ -S /var/run/docker.sock ] || [ -n "$$DOCKER_HOST" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's podman, runc and debootstrap for the containers backend (once; about a minute)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc debootstrap >/dev/null; \
	else echo "note: no container engine and no way to install podman here; the containers tests will skip"; fi
	@mkdir -p $(VENV) && touch $@

# PostgreSQL, a CDC source's database: Debian's server package, run by the lab as a process of its
# own (harness/environment/servers/postgres.py), never as the system's service (no main cluster
# is made, so none starts). Installed once, on Debian as root; elsewhere `chaoslab doctor` says it
# is missing (its tests skip, naming it).
POSTGRES_STAMP := $(VENV)/.postgres-installed
$(POSTGRES_STAMP):
	@if ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || command -v postgres >/dev/null || [ -n "$$CHAOSLAB_POSTGRES_BIN" ]; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		echo "installing Debian's postgresql for the CDC source (once; about a minute)"; \
		mkdir -p /etc/postgresql-common/createcluster.d; \
		echo "create_main_cluster = false  # chaoslab: no system cluster, no service" > /etc/postgresql-common/createcluster.d/chaoslab.conf; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; \
	else echo "note: no PostgreSQL and no way to install it here; the CDC tests will skip"; fi
	@mkdir -p $(VENV) && touch $@

# The containers backend's images (a no-op once built for this version of the lab; a few minutes
# on a machine that has none).
.PHONY: images
images: $(STAMP) jars $(CONTAINERS_STAMP)
	@$(BIN)/chaoslab images

# Where the stamps above install what they need (Debian, as root), a containers or browser test
# that finds it missing fails instead of skipping (tests/support.py: lacking).
TOOLS := $(shell command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ] && echo required)

# The second tier (docs/ci.md): every test marked `library` - the library's scenarios at full
# size, the notebooks at their own parameters, the containers backend's full tests and the long
# tests `make test`'s budget cannot hold. Whole, it keeps each test's seconds in
# tests/durations.json, which `make library SHARD=K/N` splits by into N balanced shares (as CI's
# sharded job runs it); a shard does not write them, or the next shard run on the same machine
# would split by others.
LIBRARY_OUT := runs/library$(if $(SHARD),-$(subst /,of,$(SHARD)))
library: $(STAMP) jars $(CHROMIUM_STAMP) $(CONTAINERS_STAMP) $(POSTGRES_STAMP) images
	CHAOSLAB_TOOLS=$(TOOLS) $(BIN)/python -m pytest -n 2 --dist loadgroup -m library \
		--junitxml=$(LIBRARY_OUT)/junit.xml \
		$(if $(SHARD),--shard $(SHARD),--record-times tests/durations.json)

# The first tier: lint and every test not marked `library`, a budget of 25 minutes of pytest on
# 2 cores (docs/ci.md); its tests' seconds go to .chaoslab/suite-times/ (make bench). Two
# workers, the machine's two cores: the suite is CPU-bound (docs/performance.md). Tests that
# start Spark share one worker (xdist_group "spark", see tests/support.py; pytest is kept below
# 9.2 for it, pyproject.toml says why, tests/test_grouping.py checks it).
WORKERS ?= 2
test: $(STAMP) jars $(CHROMIUM_STAMP) $(CONTAINERS_STAMP) $(POSTGRES_STAMP) images lint
	CHAOSLAB_TOOLS=$(TOOLS) $(BIN)/python -m pytest -n $(WORKERS) --dist loadgroup -m "not library"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy harness tests

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP) jars
	$(BIN)/python tests/benchmarks/bench_suite.py
	$(BIN)/python tests/benchmarks/bench_startup.py
	$(BIN)/python tests/benchmarks/bench_checker.py
	$(BIN)/python tests/benchmarks/bench_runtimes.py
	$(BIN)/python tests/benchmarks/bench_mongo_writes.py
	$(BIN)/python tests/benchmarks/bench_explore.py
	$(BIN)/python tests/benchmarks/bench_guided.py
	$(BIN)/python tests/benchmarks/bench_containers.py
	$(BIN)/python tests/benchmarks/bench_cdc.py
	$(BIN)/python tests/benchmarks/bench_library.py

# Every library scenario SOAK times with different seeds (default 10), and how often each
# variant's expectations held: false alarms and detections (chaoslab matrix --repeat).
SOAK ?= 10
# Two scenarios at a time where they may share the environment, as the demo runs them (faster
# than one at a time: docs/performance.md).
soak: $(STAMP) jars
	$(BIN)/chaoslab matrix --repeat $(SOAK) --together 2 --soak-page docs/soak.md --durations scenarios/durations.json

lab: $(STAMP) jars
	$(BIN)/jupyter lab --ip 127.0.0.1 --notebook-dir notebooks $$([ "$$(id -u)" = 0 ] && echo --allow-root)

clean:
	rm -rf $(VENV) .chaoslab .pytest_cache .ruff_cache .mypy_cache
