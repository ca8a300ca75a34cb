"""The one training loop, its run identity and checkpoints; torchrun ranks."""
