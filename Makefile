# Two entry points for a fresh machine: `make demo` (the main job) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: all demo test lint unit lit fuzz sanitize conformance known-failures bench bench-onnx compare clean

all: test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[demo,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/telc demo

test: lint unit lit sanitize

lint: $(STAMP)
	$(BIN)/ruff check dlvm telc tests bench
	$(BIN)/ruff format --check dlvm telc tests bench
	$(BIN)/mypy dlvm telc

unit: $(STAMP)
	$(BIN)/pytest -n auto tests/unit tests/gpu

lit: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/lit -sv tests/filecheck

# ONNX's backend conformance suite (tests/onnx) on compiled libraries, with the cases of
# tests/onnx/known_failures.txt as strict expected failures; `make known-failures` writes that
# file anew from a run of every case (a case that starts to pass fails `make conformance`
# until it is). Libraries are cached by digest under DLVM's cache directory.
conformance: $(STAMP)
	$(BIN)/pytest -p no:cacheprovider tests/onnx

known-failures: $(STAMP)
	$(BIN)/python tests/onnx/update_known_failures.py

# The fuzzers at length (minutes, a new random seed each run); `make test` runs them briefly.
fuzz: $(STAMP)
	DLVM_FUZZ=long $(BIN)/pytest -n auto -p no:cacheprovider tests/unit -k fuzz

# A sample model's library and the runtime under AddressSanitizer + UBSan, ThreadSanitizer and
# valgrind (docs/c-abi.md section 9); about a minute and a half, so part of `make test`.
sanitize: $(STAMP)
	sh runtime/sanitize/sanitize.sh $(BIN) build/sanitize

# The CPU benchmark's peers (PyTorch, JAX, ONNX Runtime) live in a virtual environment of their
# own, with this project installed beside them.
BENCH_VENV := bench/.venv
BENCH_STAMP := $(BENCH_VENV)/.installed

$(BENCH_STAMP): pyproject.toml bench/requirements.txt
	$(PYTHON) -m venv $(BENCH_VENV)
	$(BENCH_VENV)/bin/pip install --quiet --upgrade pip
	$(BENCH_VENV)/bin/pip install --quiet -e . -r bench/requirements.txt
	touch $(BENCH_STAMP)

bench: $(STAMP) $(BENCH_STAMP)
	$(BIN)/python bench/ir_speed.py
	$(BIN)/python bench/linear_algebra_passes.py
	$(BENCH_VENV)/bin/python bench/cpu.py
	$(BENCH_VENV)/bin/python bench/precision.py --write
	$(BENCH_VENV)/bin/python bench/nnkit.py

# Models exported from PyTorch (MLP, LeNet-5, ResNet-18, LSTM, GRU, transformer encoder), imported
# by telc: outputs against ONNX Runtime and PyTorch, three training steps against PyTorch's, and
# inference timed against ONNX Runtime; writes its section of bench/RESULTS.md. Fails when a
# comparison exceeds its tolerance.
bench-onnx: $(STAMP) $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/onnx_models.py

# The models of bench/models against the same models in PyTorch: forward outputs, losses,
# gradients and parameters after three Adam steps, within 1e-5 (relative); fails otherwise.
compare: $(STAMP) $(BENCH_STAMP)
	$(BENCH_VENV)/bin/python bench/compare.py

clean:
	rm -rf $(VENV) $(BENCH_VENV) build *.egg-info .pytest_cache .ruff_cache
