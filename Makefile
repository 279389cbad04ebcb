# The two commands of the README are a contract: on a fresh machine with only Python, Java and
# git, `make run` installs what it needs and starts jetlog on its embedded default, and
# `make test` installs everything and passes.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install run test test-fast bench bench-floor bench-spark lint clean spark-example
.PHONY: clients-env test-clients test-clients-nats clean-clients browser-env

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev,spark]'
	# An editable install leaves jetlog uncompiled, and where PYTHONDONTWRITEBYTECODE is set
	# (many containers) every start compiled all of it again: ~0.2 s of each node start here.
	$(BIN)/python -m compileall -q jetlog
	touch $(STAMP)

run: install
	$(BIN)/jetlog dev

test: install clients-env browser-env
	$(BIN)/python -m pytest -q -rs --durations=15

# Debian's chromium for the status page's browser test (tests/integration/test_status_page.py).
# Without root or sudo it cannot be installed: that test then reports itself skipped, saying why.
browser-env:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo -n"; fi; \
	  $$SUDO apt-get install -y -q chromium >/dev/null 2>&1 \
	  || { $$SUDO apt-get update -q >/dev/null 2>&1 && $$SUDO apt-get install -y -q chromium >/dev/null 2>&1; } \
	  || echo "note: could not install Debian's chromium; the status page browser test will be skipped"; }

test-fast: install
	$(BIN)/python -m pytest -q -x -m "not slow"

bench: install
	$(BIN)/jetlog bench --rounds 3 --full --out docs/benchmarks.md

# The relay's bound: the publish and get cases against a minimal stand-in behind nats-server too.
bench-floor: install
	$(BIN)/jetlog bench --floor --full --rounds 3 --out docs/benchmarks.md

# Spark source rows/s vs an in-process Arrow generator (appended to docs/benchmarks.md).
bench-spark: install
	$(BIN)/python -m jetlog.spark.bench --rounds 3 --out docs/benchmarks.md

# The example Spark pipeline (spark/orders_pipeline.py) against `make run` (jetlog dev) on
# nats://127.0.0.1:4222; override with JETLOG_URL=nats://host:port.
spark-example: install
	$(BIN)/python spark/orders_pipeline.py

lint: install
	$(BIN)/ruff check jetlog tests spark pyspark_jetlog
	$(BIN)/ruff format --check jetlog tests spark pyspark_jetlog
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# --- Client acceptance environments (tests/clients) ------------------------------------------
# Real clients run as subprocesses against jetlog and nats-server -js:
#   * @nats-io/jetstream + @nats-io/kv 3.4.0 (node >= 20): `npm ci` from the committed lockfile;
#   * nats-jetstream 0.3.0, which needs Python 3.13: a separate .venv313.
# Both are stamp-filed, so they install once. A missing Python 3.13 is reported loudly and
# recorded in .venv313/MISSING; the nats-jetstream tests then fail with that message.
NODE_DIR    := tests/clients/js
NODE_STAMP  := $(NODE_DIR)/node_modules/.installed-stamp
VENV313     := .venv313
PY313_REQS  := tests/clients/py313/requirements.txt
PY313_STAMP := $(VENV313)/.installed-stamp
CLIENT_TESTS := tests/clients tests/integration/test_consumers_natspy.py tests/integration/test_kv_obj_watch.py

clients-env: $(NODE_STAMP) $(PY313_STAMP)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "*** npm not found: node >= 20 and npm are needed for the @nats-io/jetstream client tests" >&2; exit 1; }
	cd $(NODE_DIR) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(PY313_STAMP): $(PY313_REQS)
	@py="$${PY313:-$$(sh tests/clients/find_python313.sh)}"; \
	if [ -z "$$py" ] || ! "$$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1; then \
	  msg="no Python 3.13 interpreter found (python3.13 on PATH, pyenv, ~/.pyenv/versions/3.13*; or set PY313=/path/to/python3.13): nats-jetstream 0.3.0 needs Python 3.13, so tests/clients/test_nats_jetstream.py will FAIL"; \
	  echo "" >&2; echo "****************************************************************" >&2; \
	  echo "*** $$msg" >&2; \
	  echo "****************************************************************" >&2; echo "" >&2; \
	  rm -rf $(VENV313); mkdir -p $(VENV313); echo "$$msg" > $(VENV313)/MISSING; \
	else \
	  echo "building $(VENV313) with $$py"; \
	  rm -rf $(VENV313) && "$$py" -m venv $(VENV313) && \
	  $(VENV313)/bin/python -m pip install -q --upgrade pip && \
	  $(VENV313)/bin/python -m pip install -q -r $(PY313_REQS) && \
	  $(VENV313)/bin/python -c 'import nats.jetstream, nats.client' && \
	  touch $@; \
	fi

# The client suites only: every scenario against jetlog and against nats-server -js.
test-clients: install clients-env
	$(BIN)/python -m pytest -q --durations=10 $(CLIENT_TESTS)

# The same, against the reference (nats-server -js) only: checks the expected values themselves.
test-clients-nats: install clients-env
	$(BIN)/python -m pytest -q --durations=10 -k "not jetlog" $(CLIENT_TESTS)

clean-clients:
	rm -rf $(VENV313) $(NODE_DIR)/node_modules
