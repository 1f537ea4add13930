"""Loading user-supplied objects by import path (``package.module:attribute``), for the plug-in points
configuration names: agent registrations, business writers, authorizers."""

from __future__ import annotations

import importlib
from typing import Any


def load_object(path: str, what: str) -> Any:
    """The attribute named by ``path``.

    Raises:
        ValueError: naming ``what`` was being loaded, when the path is malformed or cannot be loaded.
    """
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{what} {path!r} must look like 'package.module:attribute'")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"cannot load {what} {path!r}: {err}") from err
