"""The validation grid, as a script: ``syncpace validate`` with the same flags (root).

    python benchmarks/validate.py [--out runs/validate] [--points star4,ls4-contended]
                                  [--rate 50mbit] [--steps 40] [--sim-steps 400]

See docs/validation.md and :mod:`syncpace.validate.grid`.
"""

from __future__ import annotations

import sys

from syncpace.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["validate", *sys.argv[1:]]))
