"""Deprecated name: `python -m batched_reasoning.bench_memory` is now
`python -m batched_reasoning.bench.memory`; this one keeps working for now."""

import sys

from .bench.memory import main

if __name__ == "__main__":
    print("note: `python -m batched_reasoning.bench_memory` is deprecated; use "
          "`python -m batched_reasoning.bench.memory`", file=sys.stderr)
    main()
