"""The worker's start-up heap: frozen out of the cyclic garbage collector's reach once the worker is
built, while what tasks allocate afterwards is still collected."""

from __future__ import annotations

import gc
import weakref

from agent_worker.worker import freeze_startup_heap


class _Node:
    """An object that can sit in a reference cycle."""

    other: _Node | None = None


def test_the_start_up_heap_is_frozen_and_later_cycles_are_still_collected() -> None:
    """After ``freeze_startup_heap`` the objects alive at start-up are in the permanent generation (full
    collections no longer walk them), and a reference cycle made afterwards is still freed."""
    gc.unfreeze()
    try:
        freeze_startup_heap()
        assert gc.get_freeze_count() > 1000  # the imported SDKs alone are far more
        a, b = _Node(), _Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
    finally:
        gc.unfreeze()
