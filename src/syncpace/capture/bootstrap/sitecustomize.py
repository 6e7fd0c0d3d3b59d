"""Arms the syncpace tracer in processes started by ``syncpace run``.

It only registers an import hook: nothing happens unless the process imports
``torch.distributed`` and creates a process group. Any failure is printed once and
the program runs untraced. A ``sitecustomize`` this one shadows is still executed.
"""

import os
import sys


def _arm() -> None:
    if not os.environ.get("SYNCPACE_DIR"):
        return
    try:
        from syncpace.capture.autoload import install_import_hook

        install_import_hook()
    except Exception as exc:  # never break the user's program
        print(f"syncpace: tracing disabled in pid {os.getpid()}: {exc}", file=sys.stderr)


def _chain() -> None:
    """Execute the next ``sitecustomize`` on sys.path, which this module shadows."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        if not entry or os.path.abspath(entry) == here:
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate) as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


_arm()
_chain()
