"""Ranks started by the tests leave their objects to the OS at exit.

``tests/conftest.py`` puts this directory last on the ``PYTHONPATH`` of every process
the tests start, ``tests/multirank.py`` on every rank's (``with_ranksite``). At exit
the interpreter runs a collection over every object still alive: in a process that
imported torch, millions, ~0.5 s of CPU per rank (``import torch`` alone: 1.55 s of
user time with it, 1.08 s without), paid by every rank of every launch on a 2-core
machine. Freezing the heap as the last exit handler skips that walk; what a program
can observe -- its own exit handlers (registered later, so run before), its output,
its exit status -- is unchanged. The ``sitecustomize`` this one shadows still runs,
and one that shadows it (``syncpace run``'s bootstrap) runs this one.
"""

import atexit
import gc
import os
import sys

atexit.register(gc.freeze)  # registered first: runs after every other exit handler


def _chain() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    entries = [os.path.abspath(e) for e in sys.path if e]
    for entry in entries[entries.index(here) + 1 :] if here in entries else []:
        if entry == here:  # on the path twice: this one runs once
            continue
        candidate = os.path.join(entry, "sitecustomize.py")
        if os.path.isfile(candidate):
            with open(candidate) as f:
                code = compile(f.read(), candidate, "exec")
            exec(code, {"__name__": "sitecustomize", "__file__": candidate})
            return


_chain()
