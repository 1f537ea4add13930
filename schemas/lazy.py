"""Lazy exports for the project's package faces (PEP 562): ``agent_worker``, ``agent_worker.schemas``,
``agent_worker.activities`` and ``agent_worker.workflows`` name their public classes at the top, and a
name's module is imported only when the name is first used, so that importing one light part (the
client, a schema) does not import every heavy one. In ``schemas``, the lowest layer, so that every
package can use it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(namespace: MutableMapping[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``namespace`` (the package's ``globals()``) that imports each name
    of ``exports`` (name -> module) on first use and keeps it in ``namespace``.

    The ``__getattr__`` it returns raises AttributeError for a name not in ``exports``.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
