"""The workflow's stages, one module each: tokenize, evaluate, self-consistency, GRPO,
distillation, pretraining; and one autotune trial."""
