# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

# Training on a target: `make TARGET=cortex-m4 ARTIFACTS=out DATA=data.npz [STEPS=100] [LR=0.01] run`
# builds the trainer in ARTIFACTS with a harness through targets/Makefile (which includes
# targets/$(TARGET).mk) and runs it, emulated unless TARGET is host. `make TARGET=... tools` installs
# the target's Debian packages, or says which to install.
TARGET ?= host
STEPS ?= 100

.PHONY: demo test clean tools run federated personalize

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

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

# Flower on loopback: a SuperLink and 5 SuperNodes whose clients are generated C trainers.
# STRATEGY=fedadam, or fedavg,fedadam for both in turn.
STRATEGY ?= fedavg
federated: $(VENV)/.federated
	$(BIN)/python examples/federated/run.py --strategy $(STRATEGY)

personalize: $(VENV)/.demo
	$(BIN)/python examples/personalization/run.py

tools:
	@$(MAKE) -s -f targets/Makefile TARGET=$(TARGET) tools

run: $(VENV)/.demo tools
	$(if $(and $(ARTIFACTS),$(DATA)),,$(error run needs ARTIFACTS=<edgetrain compile output> and DATA=<.npz with x, y>))
	$(BIN)/edgetrain run $(ARTIFACTS) --target $(TARGET) --data $(DATA) --steps $(STEPS)$(if $(LR), --lr $(LR))

clean:
	rm -rf $(VENV) out build *.egg-info
