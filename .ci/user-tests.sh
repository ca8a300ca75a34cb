#!/usr/bin/env bash
# CI as the unprivileged user, once the services run: the README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
. .venv/bin/activate
export LLAMA_CPP="$HOME/.cache/batched-reasoning/llama.cpp"  # built by .ci/user-setup.sh
python -m pytest -q
