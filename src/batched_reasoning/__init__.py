"""batched-reasoning: a from-scratch Qwen3 generation library and the stages of its workflow.

Layers, lowest first; a module imports only from its own layer and those below
(tests/test_layers.py):

    core                     the machine and the files: devices, wisdom, memory, run records
    model, data              the Qwen3 decoder and its kernels; prompts, grading, records, Hub
    engine, world            generation (caches, scheduling, sampling); the offline world
    training                 the one training loop, checkpoints, ranks
    stages                   tokenize, evaluate, self-consistency, GRPO, distillation, pretraining
    workflow, bench          the plan, tables and story; benchmarks
"""
