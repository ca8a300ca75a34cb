#!/usr/bin/env bash
# CI as the unprivileged user, before the services start: the README's quick start (a fresh
# virtual environment and the default run), the commands README.md and docs/ give for a finished
# run, and the README's test setup. Each documented command is one line here, word for word
# (tests/test_docs.py holds them to the documents).
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_QUIET=1

# README, quick start: the CPU wheel of torch, then the project, then the default run.
python3 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e . && snakemake --cores 1

# README and docs/reproducibility.md, on the finished run: nothing is left to do, so these only
# check and report; then the report, and the commands that mark, forget or rerun outputs.
snakemake
snakemake --cores all
snakemake -n
snakemake -n results/tables/evaluate.tsv
snakemake --summary
snakemake --report results/report.zip
snakemake --touch
snakemake --cleanup-metadata results/tables/story.md
snakemake --unlock
# docs/data-parallel.md: rerun the training stages (and what reads them) after a change
snakemake --forcerun grpo distill

# docs/cluster.md's extra, then the README's test setup
pip install -e '.[slurm]'
pip install -e '.[dev,slurm]' && pip install --no-deps reasoning-from-scratch==0.2.0
# llama.cpp's llama-batched-bench for the benchmark's peer tests (minutes; the log on failure)
log=$(mktemp)
python -m batched_reasoning.bench.llama_cpp build "$HOME/.cache/batched-reasoning/llama.cpp" >"$log" 2>&1 || { tail -40 "$log"; exit 1; }
