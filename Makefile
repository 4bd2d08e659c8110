# mlsys — two commands for a user: `make demo` and `make test` (`make docs`: docs/config.md).
PY      ?= python3.11
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
export DS_ACCELERATOR ?= cpu
export DS_BUILD_OPS ?= 0

.PHONY: install demo test test-slurm test-gpu lint docs clean

install: $(STAMP)

# Order matters: torch (CPU build, pinned), then deepspeed without build isolation
# (its setup imports torch), then the rest and the package itself, editable. Every version,
# transitive ones included, comes from constraints.txt: the packages corpus is made of them.
LOCK    := -c constraints.txt
$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(LOCK) --upgrade pip setuptools wheel
	$(BIN)/pip install -q $(LOCK) torch==2.13.0
	$(BIN)/pip install -q $(LOCK) --no-build-isolation deepspeed==0.19.8
	$(BIN)/pip install -q $(LOCK) --no-build-isolation -e '.[test]'
	touch $(STAMP)

test: install
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

# Real SLURM, as root: installs slurm-wlm/munge/shellcheck if missing, lints the sbatch
# templates, starts a one-node cluster on localhost, runs tests/slurm, stops the cluster.
test-slurm: install
	bash launch/slurm/local_cluster.sh install
	for f in launch/slurm/*.sbatch launch/slurm/*.sh; do bash -n "$$f" || exit 1; done
	shellcheck launch/slurm/*.sbatch launch/slurm/*.sh
	MLSYS_TEST_SLURM=1 $(BIN)/python -m pytest -q tests/slurm

# The GPU path (never part of `make test`, where tests/gpu skips itself): bf16 ZeRO-3 V-cycles
# of a small GPT-2 and Llama over NCCL on up to 2 GPUs. Needs a CUDA build of torch 2.13.0
# (the one `make install` puts in .venv on a machine whose pip index serves CUDA wheels).
# Figures (MFU, device memory) to $(GPU_FIGURES) as JSON.
GPU_FIGURES ?= runs/gpu-figures
test-gpu: install
	MLSYS_TEST_GPU=1 DS_ACCELERATOR=cuda MLSYS_GPU_FIGURES=$(GPU_FIGURES) \
		$(BIN)/python -m pytest -q -s tests/gpu

demo: install
	$(BIN)/python -m launch.demo

# The configuration reference, from the field docstrings (tests/test_config_reference.py
# fails when it is not current).
docs: install
	$(BIN)/python -m launch.config_reference

clean:
	rm -rf runs/demo
