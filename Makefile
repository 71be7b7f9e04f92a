# gpujob: `make run` trains the quickstart on this machine; `make test` runs the test suite.
# Both install what they need (a venv, Debian packages, a Docker engine) and are idempotent.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: run test deps lint bench clean

# uv makes the venv's install many times faster than pip; pip only bootstraps uv. uv reads no
# pip.conf: the machine's pip sources are handed to it (launcher/plan/env_build.py).
$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --quiet --disable-pip-version-check uv
	eval "$$(python3 launcher/plan/env_build.py)" && export UV_INDEX_STRATEGY=unsafe-best-match \
	  && $(VENV)/bin/uv pip install --quiet --python $(PY) -e '.[dev]'
	touch $(STAMP)

deps:
	bash infra/install-deps.sh --docker

run: $(STAMP)
	$(VENV)/bin/gpujob submit jobs/quickstart.yaml

test: $(STAMP) deps
	$(VENV)/bin/ruff check launcher tests infra bench jobs
	$(VENV)/bin/lint-imports
	$(VENV)/bin/actionlint .github/workflows/images.yml
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check launcher tests infra bench jobs
	$(VENV)/bin/ruff format --check launcher tests infra bench jobs

bench: $(STAMP)
	$(PY) bench/cli_startup.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
