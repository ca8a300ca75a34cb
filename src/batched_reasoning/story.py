"""Deprecated name: `python -m batched_reasoning.story` is now
`python -m batched_reasoning.workflow.story`; this one keeps working for now."""

import sys

from .workflow.story import main

if __name__ == "__main__":
    print("note: `python -m batched_reasoning.story` is deprecated; use "
          "`python -m batched_reasoning.workflow.story`", file=sys.stderr)
    main()
