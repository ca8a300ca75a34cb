"""The Qwen3 decoder as the book writes it, and what makes it fast or loadable: attention
kernels, packed CPU weights, config, safetensors checkpoints, the book's model, its memory.
It knows no cache implementation, engine or stage."""
