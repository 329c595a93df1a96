# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# Training on a target: `make TARGET=cortex-m4 ARTIFACTS=out DATA=data.npz [STEPS=100] [LR=0.01]
# [FLASH=flash.bin SAVE_EVERY=10] run` (FLASH: checkpoints in a file-backed flash, resumed from at start)
# builds the trainer in ARTIFACTS with a harness through targets/Makefile (which includes
# targets/$(TARGET).mk) and runs it, emulated unless TARGET is host. `make TARGET=... tools` installs
# the target's Debian packages, or says which to install.
TARGET ?= host
STEPS ?= 100

.PHONY: demo test lint clean tools run federated personalize text web bench-memory bench-speed bench-build

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[demo]'
	touch $@

$(VENV)/.federated: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[federated]'
	touch $@

# torch is pinned to the CPU build (tests compare gradients against its autograd).
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/edgetrain demo

# One pytest worker per core (pytest-xdist), each taking whole test files, so a file's compiled
# fixtures are built once, in the order tests/conftest.py gives them (the longest tiers first):
# xdist's own order, most tests first, left the sanitizer tier's file of two tests to run alone at the end.
test: $(VENV)/.test
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder

# ruff's rules and formatting over the whole repository and mypy over compiler/, as pyproject.toml
# configures them (`ruff format .` formats).
lint: $(VENV)/.test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy compiler

# Flower on loopback: a SuperLink and 5 SuperNodes whose clients are generated C trainers.
# STRATEGY=fedadam, or fedavg,fedadam for both in turn.
STRATEGY ?= fedavg
federated: $(VENV)/.federated
	$(BIN)/python examples/federated/run.py --strategy $(STRATEGY)

personalize: $(VENV)/.demo
	$(BIN)/python examples/personalization/run.py

# The digits classifier trained in the browser through WebAssembly (examples/web): builds the
# trainer for wasm32 and serves the page on http://127.0.0.1:$(PORT).
PORT ?= 8000
web: $(VENV)/.demo
	@$(MAKE) -s -f targets/Makefile TARGET=wasm32 tools
	$(BIN)/python examples/web/run.py --port $(PORT)

# A character-level transformer pre-trained in PyTorch (hence the test extra), fine-tuned in C.
text: $(VENV)/.test
	$(BIN)/python examples/text/run.py

tools:
	@$(MAKE) -s -f targets/Makefile TARGET=$(TARGET) tools

run: $(VENV)/.demo tools
	$(if $(and $(ARTIFACTS),$(DATA)),,$(error run needs ARTIFACTS=<edgetrain compile output> and DATA=<.npz with x, y>))
	$(BIN)/edgetrain run $(ARTIFACTS) --target $(TARGET) --data $(DATA) --steps $(STEPS)$(if $(LR), --lr $(LR))$(if $(FLASH), --flash $(FLASH))$(if $(SAVE_EVERY), --save-every $(SAVE_EVERY))

# ONNX Runtime training 1.19.2, the benchmarks' reference, gets its own venv: its wheel provides the
# `onnxruntime` module too and would shadow the inference package of .venv.
ORT_VENV := bench/.venv-ort
$(ORT_VENV)/.installed:
	$(PYTHON) -m venv $(ORT_VENV)
	$(ORT_VENV)/bin/pip install -q onnxruntime-training-cpu==1.19.2 torch==2.13.0 onnx numpy
	touch $@

# RAM of the MLPerf Tiny models under each update policy, as cortex-m4's size tool counts it, beside
# ONNX Runtime training's (bench/README.md); ARGS="--models kws --no-ort" for a part of it.
bench-memory: $(VENV)/.test $(ORT_VENV)/.installed
	@$(MAKE) -s -f targets/Makefile TARGET=cortex-m4 tools
	$(BIN)/python bench/memory.py $(ARGS)

# Training-step time beside ONNX Runtime training and PyTorch, and instructions per step on cortex-m4
# (bench/README.md); ARGS=--quick for a short run.
bench-speed: $(VENV)/.test $(ORT_VENV)/.installed
	@$(MAKE) -s -f targets/Makefile TARGET=cortex-m4 tools
	$(BIN)/python bench/speed.py $(ARGS)

# Build time of a big model: torchvision's resnet18 through generate_artifacts and the first
# api.Module on one core, against a 10 s budget (bench/README.md).
bench-build: $(VENV)/.test
	$(BIN)/python bench/build_time.py $(ARGS)

clean:
	rm -rf $(VENV) out build *.egg-info
