"""Deprecated name: `python -m batched_reasoning.llama_cpp` is now
`python -m batched_reasoning.bench.llama_cpp`; this one keeps working for now."""

import sys

from .bench.llama_cpp import main

if __name__ == "__main__":
    print("note: `python -m batched_reasoning.llama_cpp` is deprecated; use "
          "`python -m batched_reasoning.bench.llama_cpp`", file=sys.stderr)
    main()
