"""Benchmarks: generation throughput (`python -m batched_reasoning.bench`), memory, the
roofline, llama.cpp as a peer, per-class summaries."""
