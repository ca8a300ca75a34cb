"""The GPU check: one command that proves the CUDA path on a machine lent for minutes, offline,
with only the repository's working tree (`python -m batched_reasoning.gpu_check --out DIR`)."""
