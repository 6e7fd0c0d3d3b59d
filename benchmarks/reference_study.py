"""The reference study with and without pacing, by one command:
``syncpace validate --reference`` (needs no root).

    python benchmarks/reference_study.py [--scenario FILE] [--json rows.json]

See docs/validation.md and :mod:`syncpace.validate.reference`.
"""

from __future__ import annotations

import sys

from syncpace.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["validate", "--reference", *sys.argv[1:]]))
