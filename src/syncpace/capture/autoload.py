"""Arms the tracer the moment ``torch.distributed`` is imported (no code change).

Used by the ``sitecustomize`` that ``syncpace run`` puts on ``PYTHONPATH``: an import
hook waits for ``torch.distributed.distributed_c10d`` to finish loading and then
installs :mod:`syncpace.capture.torch_hooks`, before any user code can create a group.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Any

_TARGET = "torch.distributed.distributed_c10d"


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._inner.exec_module(module)
        try:
            # Imported only now: every Python process started by ``syncpace run`` loads
            # this module, and the tracer pulls in torch.
            from syncpace.capture.tracer import attach

            attach()
        except Exception as exc:  # the job runs untraced rather than not at all
            print(f"syncpace: tracing disabled: {exc}", file=sys.stderr)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def install_import_hook() -> None:
    if _TARGET in sys.modules:
        from syncpace.capture.tracer import attach  # torch is loaded already here

        attach()
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
