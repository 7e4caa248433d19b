# Headroom: `make demo` runs the product on its embedded default; `make test` runs every test tier.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
PORT ?= 8000
# Tests use the PostgreSQL that the machine provides (trust auth on 127.0.0.1:5432). Each run creates its own
# test database, test_headroom_<TEST_RUN_ID or pid>, so two runs on one machine do not collide.
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/headroom

.PHONY: help install system-deps demo demo-headless migrate test test-fast test-db test-services test-realvllm bench bench-full clean

help:
	@echo "make demo          run Headroom on SQLite with the demo fleet at http://127.0.0.1:$(PORT), playing the story (README)"
	@echo "make demo-headless the surge-10x scenario with no browser, Headroom against keda-queue, as JSON"
	@echo "make test          install what the tests need and run every tier"
	@echo "make test-fast     pure tiers only (simulator, engine, parsers): no services"
	@echo "make install       create .venv and install Headroom with its test extras (idempotent)"
	@echo "make bench         the quick benchmarks, about 10 minutes (docs/benchmarks.md says which tables)"
	@echo "make bench-full    every script in bench/: hours"

# Re-installs only when pyproject.toml changed since the last install.
install: $(STAMP)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -c "import ensurepip" 2>/dev/null || { \
		echo "installing Debian's python3-venv (python3 -m venv needs it)"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			python3-venv >/dev/null; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	@touch $(STAMP)

# Debian packages the service tiers need (kubectl is Debian's kubernetes-client); installed only when missing.
# PostgreSQL and Redis are the machine's own services. A test that misses any of them fails, never skips.
system-deps:
	@missing=""; \
	command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v kubectl >/dev/null 2>&1 || missing="$$missing kubernetes-client"; \
	command -v openssl >/dev/null 2>&1 || missing="$$missing openssl"; \
	test -z "$$missing" || { \
		echo "installing Debian's$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			$$missing >/dev/null; }

migrate: install system-deps
	DEBUG=1 $(BIN)/python manage.py migrate --noinput -v 0

# The live demo: SQLite, the sandbox fleet and Kubernetes API, the control loop in-process, the UI; by default the
# story (README, "What you see"), at 2x. DEMO_ARGS="--scenario surge" (or daily, steady, ...) plays other traffic.
demo: install migrate
	DEBUG=1 $(BIN)/python manage.py seed_demo
	DEBUG=1 KUBERNETES_ENABLED=true PROMETHEUS_ENABLED=true $(BIN)/python manage.py demo --port $(PORT) $(DEMO_ARGS)

# The demo's surge without a browser: Headroom and keda-queue on the same traffic, one JSON object on stdout.
# Only the JSON goes to stdout (make's own echo and the setup's output go to stderr), so it can be piped to jq.
demo-headless: install system-deps
	@DEBUG=1 $(BIN)/python manage.py migrate --noinput -v 0 >&2
	@DEBUG=1 $(BIN)/python manage.py seed_demo >&2
	@echo "running the surge-10x scenario under Headroom, then keda-queue (about 5 minutes)" >&2
	@DEBUG=1 KUBERNETES_ENABLED=true PROMETHEUS_ENABLED=true $(BIN)/python manage.py demo --headless --json $(DEMO_ARGS)

# Tiers, fastest first. Each runs only the test folders that exist (pytest on no folder would run all).
FAST_TESTS := $(wildcard tests/sim tests/engine tests/parsers tests/deploy tests/sandbox_realvllm)
DB_TESTS := $(wildcard tests/core tests/scaling tests/incidents)
SERVICE_TESTS := $(wildcard tests/sandbox tests/drivers tests/integration tests/chaos tests/browser)
# The real-vLLM tier is kept out of the others with its marker and run last by test-realvllm.
REAL_VLLM_TESTS := $(wildcard tests/realvllm)
PYTEST := $(BIN)/pytest -q -p no:cacheprovider
# Every tier but the real-vLLM one runs on pytest-xdist workers (each with its own test database, Redis database and
# ports, tests/isolation.py): CI has two cores. The service tier mostly waits (stories played in wall time, cold
# starts, scrapes): its two longest tests start first, and `--dist loadgroup` hands out one test at a time (the
# default hands out the first chunk of tests to one worker), so they start on different workers (tests/conftest.py).
# WORKERS=1 runs every tier in one process.
WORKERS ?= 2
PARALLEL := $(if $(filter-out 1,$(WORKERS)),-n $(WORKERS))

# The real-vLLM tier's virtualenv (about 2 minutes cold) installs in the background while the other tiers run;
# test-realvllm then runs the install again, which only checks that vLLM imports (a failed background install
# is retried there, in the open, and fails the tier loudly).
VLLM_INSTALL_LOG := .cache/vllm-install.log

test: install system-deps
	@mkdir -p .cache; installer=; \
	if [ -n "$(REAL_VLLM_TESTS)" ]; then \
		echo "installing the real-vLLM virtualenv in the background ($(VLLM_INSTALL_LOG))"; \
		$(BIN)/python -m sandbox.realvllm install > $(VLLM_INSTALL_LOG) 2>&1 & installer=$$!; fi; \
	$(MAKE) --no-print-directory test-fast test-db test-services; tiers=$$?; \
	if [ -n "$$installer" ] && ! wait $$installer; then \
		echo "the background real-vLLM install failed (its log: $(VLLM_INSTALL_LOG)); test-realvllm retries it"; fi; \
	[ $$tiers -eq 0 ] && $(MAKE) --no-print-directory test-realvllm

test-fast: install
	$(if $(FAST_TESTS),$(PYTEST) $(PARALLEL) $(FAST_TESTS),@echo "no fast tests")

test-db: install
	$(if $(DB_TESTS),DATABASE_URL=$(TEST_DATABASE_URL) $(PYTEST) $(PARALLEL) $(DB_TESTS),@echo "no database tests")

test-services: install system-deps
	$(if $(SERVICE_TESTS),DATABASE_URL=$(TEST_DATABASE_URL) $(PYTEST) $(PARALLEL) $(if $(PARALLEL),--dist loadgroup) $(SERVICE_TESTS),@echo "no service tests")

# A real vLLM server on the CPU, in its own virtualenv (.cache/vllm-venv): see docs/real-vllm.md.
test-realvllm: install system-deps
	$(if $(REAL_VLLM_TESTS),$(BIN)/python -m sandbox.realvllm install,@echo "no real vLLM tests")
	$(if $(REAL_VLLM_TESTS),$(PYTEST) -m real_vllm $(REAL_VLLM_TESTS),)

# The quick benchmarks: the tables that the top of docs/benchmarks.md says each reproduces (about 3 minutes of CPU,
# 10 minutes on the loaded shared 2-core box). bench-full runs every script in bench/ with its defaults: hours.
BENCH_QUICK := "bench/forecast_table.py" "bench/sim_speed.py --quick" "bench/forecast_incremental.py" \
	"bench/tune_baselines.py"

bench: install
	@for command in $(BENCH_QUICK); do echo "== $$command"; $(BIN)/python $$command || exit 1; done

bench-full: install
	@for script in bench/*.py; do echo "== $$script"; $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) var .pytest_cache
