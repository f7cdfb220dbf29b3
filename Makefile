# The README's two commands: `make chat` and `make test`. Each sets up what it needs first:
# a virtual environment in .venv, the package, OpenBLAS on Linux, and the default model.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
MODEL ?= smollm2-135m
# the registry's models: the real-model tests run each of them
MODELS ?= smollm2-135m qwen2.5-coder-0.5b gemma3-270m
# `lazymlx` is installed in .venv, not on the PATH: said after setup and after the chat
HINT := lazymlx is in $(BIN)/: run `source $(BIN)/activate` to type `lazymlx ...` (or call $(BIN)/lazymlx)

.PHONY: chat test setup openblas model models lint

chat: setup openblas model
	$(BIN)/lazymlx chat --model $(MODEL)
	@echo '$(HINT)'

test: setup openblas models lint
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

setup: $(VENV)/.installed

# An editable install of this layout (models/ and cli/ install inside lazymlx) makes setuptools
# print a 10-line note about folders that share a package's name: nothing to act on, so not shown.
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install -q -e ".[dev]"
	touch $@
	@echo '$(HINT)'

# MLX's Linux wheel links reference BLAS; lazymlx binds the system OpenBLAS when it exists.
openblas: setup
	@if ! $(BIN)/python -c "import sys; from lazymlx import platform as p; sys.exit(0 if not p.is_linux() or p.find_openblas() else 1)"; then \
	  echo "installing OpenBLAS (libopenblas0-pthread)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi; \
	  if command -v apt-get >/dev/null && { [ -z "$$SUDO" ] || command -v sudo >/dev/null; }; then \
	    $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq libopenblas0-pthread >/dev/null; \
	  else \
	    echo "warning: install OpenBLAS with your package manager; without it MLX matmuls are ~50x slower"; \
	  fi; \
	fi

model: setup
	$(BIN)/lazymlx models pull $(MODEL)

models: setup
	for name in $(MODELS); do $(BIN)/lazymlx models pull $$name || exit 1; done
