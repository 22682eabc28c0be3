# make demo | make test         — CPU machines (a venv with torch 2.13.0 CPU, Triton's interpreter)
# make test-gpu                 — the GPU machine (no venv, no network; runs from the tree)

VENV   := .venv
PY     := $(VENV)/bin/python
# Written once the venv holds torch and this package (editable); redone when the metadata changes.
STAMP  := $(VENV)/.mini_inductor-installed
ARGS   ?=
# make fuzz: how many programs, from which seed
N      ?= 200
SEED   ?= 0

.PHONY: venv tools demo test test-gpu opinfo opinfo-gpu fuzz

venv: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	@# torch first, pinned: on CPU machines this is the local CPU wheel; resolving torch through
	@# install_requires instead could pull a CUDA build.
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install torch==2.13.0
	$(PY) -m pip install -e '.[test]'
	@# A CPU torch brings no Triton: the interpreter's, at the version these tests are run with. A CUDA
	@# torch's own Triton is left alone.
	$(PY) -c "import triton" 2>/dev/null || $(PY) -m pip install triton==3.6.0
	touch $@

# Graphviz (extra .svg files beside the report, which draws its own pictures) and Chromium (the report's
# browser tests), from Debian's packages when we may install them; without Chromium those tests are skipped.
tools:
	@command -v dot >/dev/null && command -v chromium >/dev/null || \
		{ [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && \
		  (apt-get update -qq && apt-get install -y -qq graphviz chromium) >/dev/null 2>&1; } || \
		echo "note: graphviz/chromium not installed (no extra .svg files; the report's browser tests are skipped)"

# On a machine whose python3 sees a CUDA GPU (the GPU machine: no venv, no network) the demo runs
# from the tree; elsewhere it sets up the venv and runs the kernels in Triton's interpreter.
demo:
	@if python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then \
		echo "PYTHONPATH=. python3 -m mini_inductor demo $(ARGS)"; \
		PYTHONPATH=. python3 -m mini_inductor demo $(ARGS); \
	else \
		$(MAKE) --no-print-directory venv && \
		echo "TRITON_INTERPRET=1 $(PY) -m mini_inductor demo $(ARGS)" && \
		TRITON_INTERPRET=1 $(PY) -m mini_inductor demo $(ARGS); \
	fi

# --min-passed=1: a run that passes nothing (everything skipped or deselected) is a failure.
test: venv tools
	TRITON_INTERPRET=1 $(PY) -m pytest -n 2 -m "not gpu" --min-passed=1 tests $(ARGS)

test-gpu:
	PYTHONPATH=. python3 -m pytest -m gpu --min-passed=1 tests $(ARGS)

# The whole OpInfo sweep (every op of PyTorch's op_db), with a table and the counts at the end.
# CPU float32 in the interpreter (about 15 minutes on 2 cores); opinfo-gpu: float16/bfloat16 on CUDA.
# The counts end with the issue's targets (>= 97% correct, >= 60% generated, no wrong answer).
opinfo: venv
	MINI_OPINFO_ALL=1 TRITON_INTERPRET=1 $(PY) -m pytest -n 2 -m "not gpu" tests/opinfo $(ARGS)

# 8 workers on the 16-core GPU machine; MINI_OPINFO_OUT=<folder> also writes the results there.
opinfo-gpu:
	MINI_OPINFO_ALL=1 PYTHONPATH=. python3 -m pytest -n 8 -q -m gpu tests/opinfo $(ARGS)

# Differential fuzzing (tests/fuzz/README.md): N random programs of seed SEED, eager against compiled,
# with a table of outcomes; ARGS="--jobs 2 --autograd --out DIR". On the GPU machine from the tree
# (on cuda), elsewhere in the venv with Triton's interpreter.
fuzz:
	@if python3 -c "import sys, torch; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then \
		echo "PYTHONPATH=. python3 -m tests.fuzz --n $(N) --seed $(SEED) $(ARGS)"; \
		PYTHONPATH=. python3 -m tests.fuzz --n $(N) --seed $(SEED) $(ARGS); \
	else \
		$(MAKE) --no-print-directory venv && \
		echo "TRITON_INTERPRET=1 $(PY) -m tests.fuzz --n $(N) --seed $(SEED) --device cpu $(ARGS)" && \
		TRITON_INTERPRET=1 $(PY) -m tests.fuzz --n $(N) --seed $(SEED) --device cpu $(ARGS); \
	fi
