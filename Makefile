# Two commands for a fresh machine:  make demo   |   make test
# Each creates .venv on first use (pip, the exact versions of requirements.lock).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo serve-demo test test-fast lint typecheck browser postgres image clean

# Exact versions from requirements.lock (scripts/lock.py writes it), used as constraints:
# pyproject.toml's ranges choose what is installed, the lock which version, so a new
# release of anything (torch among them: a newer one from PyPI is a CUDA build of several
# GB) never enters by itself. Every file tagalign needs comes with the packages it names.
$(STAMP): pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/tagalign demo

# the demo project in the web page, with accept/reject (learning is off unless allowed)
serve-demo: $(STAMP)
	$(VENV)/bin/tagalign serve demo-project --allow-learn

# Debian's chromium for the web page's browser test (skipped when it cannot be installed;
# with CI=true any skipped test fails the run, see tests/skip_report.py).
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium not installed: browser tests will be skipped (a CI=true run then fails)"; \
	fi

# PostgreSQL server binaries for the feedback store's PostgreSQL tests (tests/test_feedback.py
# starts a throwaway cluster; skipped without initdb/pg_ctl, which fails a CI=true run).
postgres:
	@if ! command -v initdb >/dev/null && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		&& [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null) \
		|| echo "postgresql not installed: its feedback-store tests will be skipped (a CI=true run then fails)"; \
	fi

# Annif's own OpenAPI document for the conformance tests (tests/test_serve_annif.py):
# taken from the annif wheel on PyPI at setup time, never committed (.whl/ is ignored).
ANNIF_OPENAPI := .whl/annif-1.4.3/annif/openapi/annif.yaml
$(ANNIF_OPENAPI): | $(STAMP)
	$(VENV)/bin/pip download -q --no-deps annif==1.4.3 -d .whl/
	$(PY) -c "import zipfile; zipfile.ZipFile('.whl/annif-1.4.3-py3-none-any.whl').extract('annif/openapi/annif.yaml', '.whl/annif-1.4.3')"

# everything CI runs: ruff, mypy, then the whole suite (both tiers, docs/development.md)
test: $(STAMP) browser postgres $(ANNIF_OPENAPI) lint typecheck
	OMP_NUM_THREADS=2 $(VENV)/bin/pytest -q -p no:cacheprovider --durations=25

# the fast tier, about a minute: unit tests without servers, subprocesses, browser, Ray,
# PostgreSQL or training on the shared data (the tests marked slow are left out; which
# those are: tests/conftest.py)
test-fast: $(STAMP)
	OMP_NUM_THREADS=2 $(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow" --durations=10

# The server's container image (Containerfile, docs/deploy.md). podman with the vfs storage
# driver and chroot isolation works on machines without overlay or user namespaces; with
# docker: make image IMAGE_BUILD='docker build'. IMAGE_ARGS adds build options, e.g.
# IMAGE_ARGS='--build-arg BASE=debian-python:bookworm'. scripts/test-image.sh checks it.
IMAGE ?= localhost/tagalign:latest
IMAGE_BUILD ?= podman --storage-driver vfs build --isolation chroot --format docker
IMAGE_ARGS ?=
image:
	$(IMAGE_BUILD) $(IMAGE_ARGS) -f Containerfile -t $(IMAGE) .

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks

# mypy over src/tagalign with the strictness set in pyproject.toml [tool.mypy]
typecheck: $(STAMP)
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) demo-project test-artifacts .mypy_cache
