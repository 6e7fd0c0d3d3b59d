"""Keep TorchDynamo out of the tracing path.

Under ``torch.compile``, Dynamo's frame hook sees every Python frame that starts while
a compiled region runs, including the frames C++ enters through the process-group
trampoline: ``torch.compile(DDP(model))`` runs DDP's ``_pre_forward``, whose reducer
broadcasts through :class:`~syncpace.capture.process_group.TracingProcessGroup`, and
Dynamo then tries to compile the traced ``broadcast`` — which it cannot (a process
group is a script object to it), so the job crashes.

The tracer's frames are plain bookkeeping around a call into C++: there is nothing in
them to compile. Their code objects are marked *skip, and skip everything they call*
(Dynamo's frame-execution strategy, the mechanism behind ``torch.compiler.disable``
without its wrapper), so Dynamo runs them untouched at no cost per call, and the real
backend underneath is what compiled graphs talk to. Uncompiled jobs do not notice:
the mark is a field on the code object that only Dynamo's frame hook reads.
"""

from __future__ import annotations

import types
from typing import Any

from syncpace.capture.log import warn_once


def _codes(obj: Any) -> list[types.CodeType]:
    """Code objects of a function, method, property or every one of a class's."""
    if isinstance(obj, type):
        return [code for value in vars(obj).values() for code in _codes(value)]
    if isinstance(obj, (staticmethod, classmethod)):
        return _codes(obj.__func__)
    if isinstance(obj, property):
        return [code for f in (obj.fget, obj.fset, obj.fdel) if f for code in _codes(f)]
    code = getattr(obj, "__code__", None)
    return [code] if isinstance(code, types.CodeType) else []


def keep_out(*objects: Any) -> int:
    """Mark every code object of ``objects`` so Dynamo skips it and whatever it calls.

    Returns how many code objects were marked (0 where this torch has no such
    mechanism: the frames are then left as they are, and a warning says so once).
    """
    try:
        from torch._C._dynamo.eval_frame import (  # lazy: torch is loaded by the caller
            _FrameAction,
            _FrameExecStrategy,
            set_code_exec_strategy,
        )
    except ImportError as exc:
        warn_once("dynamo", "cannot keep torch.compile out of the tracer: %s", exc)
        return 0
    strategy = _FrameExecStrategy(_FrameAction.SKIP, _FrameAction.SKIP)
    seen: set[int] = set()
    for obj in objects:
        for code in _codes(obj):
            if id(code) not in seen:
                seen.add(id(code))
                set_code_exec_strategy(code, strategy)
    return len(seen)
