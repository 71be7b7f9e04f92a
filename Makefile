# gpujob: `make run` trains the quickstart on this machine; `make test` runs the test suite.
# Both install what they need (a venv, Debian packages, a Docker engine) and are idempotent.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test deps lint bench docs clean

# uv makes the venv's install many times faster than pip; pip only bootstraps uv. uv reads no
# pip.conf: the machine's pip sources are handed to it (launcher/plan/env_build.py). Bytecode is
# compiled at install (and for the checkout before the tests): the suite starts thousands of
# Python processes, and under PYTHONDONTWRITEBYTECODE each would compile its imports again.
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --disable-pip-version-check uv
	eval "$$(python3 launcher/plan/env_build.py)" && export UV_INDEX_STRATEGY=unsafe-best-match \
	  && $(VENV)/bin/uv pip install --quiet --compile-bytecode $${uv_no_index:+--no-index} --python $(PY) -e '.[dev]'
	touch $(STAMP)

deps:
	bash infra/install-deps.sh --docker

run: $(STAMP)
	$(VENV)/bin/gpujob submit jobs/quickstart.yaml

# Two pytest workers (pytest-xdist), each a session with a lab of its own, a test file wholly on
# one: on this 2-core kind of machine the suite's waits (a host booting, a checkpoint syncing)
# overlap the other worker's work. TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
test: $(STAMP) deps
	$(VENV)/bin/ruff check launcher tests infra bench jobs docs setup.py
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	$(VENV)/bin/actionlint .github/workflows/images.yml
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir site
	$(PY) -m compileall -q -j 0 launcher infra
	$(VENV)/bin/python -m pytest -q $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder)

lint: $(STAMP)
	$(VENV)/bin/ruff check launcher tests infra bench jobs docs setup.py
	$(VENV)/bin/ruff format --check launcher tests infra bench jobs docs setup.py

# the reference pages generated from the code (tests/docs checks they are current), then the site
docs: $(STAMP)
	$(PY) docs/gen_reference.py
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir site

bench: $(STAMP)
	$(PY) bench/cli_startup.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache site
