"""Generation: KV caches, which request takes which slot, left padding, sampling, and the
four strategies (sequential, batched, batched_stop, continuous)."""
