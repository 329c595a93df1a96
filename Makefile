# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(VENV)/.demo: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[demo]'
	touch $@

# torch is pinned to the CPU build (tests compare gradients against its autograd).
$(VENV)/.test: pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e '.[test]'
	touch $@

demo: $(VENV)/.demo
	$(BIN)/edgetrain demo

test: $(VENV)/.test
	$(BIN)/python -m pytest -q

clean:
	rm -rf $(VENV) out build *.egg-info
