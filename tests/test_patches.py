"""Every patch id lives in ``workflows/patches.py``, named and explained there, and workflow code asks
it through ``workflows.patches.patched``."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from agent_worker.workflows import patches

WORKFLOWS = Path(__file__).resolve().parent.parent / "workflows"


def _patched_arguments(path: Path) -> list[ast.expr]:
    """The argument of every ``patched(...)`` call in ``path`` (``workflows.patches.patched``, or the
    SDK's ``workflow.patched`` / ``deprecate_patch``, which the lint refuses outside patches.py)."""
    names = ("patched", "deprecate_patch")
    return [
        node.args[0]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr in names)
            or (isinstance(node.func, ast.Name) and node.func.id in names)
        )
        and node.args
    ]


def test_every_patch_id_is_a_constant_of_workflows_patches_and_used_by_name() -> None:
    """No module but ``workflows/patches.py`` declares a ``*_PATCH`` id or passes a literal to
    ``workflow.patched``; every call names a constant of that module, and every constant there is
    used by some workflow module and has a comment saying what it guards and when it came."""
    declared = {name for name in patches.__all__ if name.endswith("_PATCH")}
    used: set[str] = set()
    for path in sorted(WORKFLOWS.glob("*.py")):
        if path.name == "patches.py":
            continue
        assert not re.search(r'^\w+_PATCH = "', path.read_text(), re.M), path.name
        for argument in _patched_arguments(path):
            name = argument.attr if isinstance(argument, ast.Attribute) else getattr(argument, "id", None)
            assert name in declared, f"{path.name}: patched({ast.unparse(argument)})"
            used.add(name)
    # ``ONE_MARKER_PATCH`` is asked by ``patched`` itself, for every patch it covers.
    assert used == declared - {"ONE_MARKER_PATCH"}
    source = (WORKFLOWS / "patches.py").read_text()
    for name in declared:
        comment = source.split(f"\n{name} = ")[0].rsplit("\n\n", 1)[-1].split("_PATCH = ")[-1]
        assert re.search(r"\d+\.\d+\.\d+, \d{4}-\d{2}-\d{2}, [0-9a-f]{7}", comment), name
    assert len(set(vars(patches)[n] for n in declared)) == len(declared), "a patch id is declared twice"
    # A run with the minimum of round trips asks every other patch at its start (why: PATCHES_AT_START);
    # the fork patch is asked only by forks, in the same first activation, before any local activity.
    at_start = set(patches.PATCHES_AT_START)
    everything = {vars(patches)[n] for n in declared}
    assert at_start == everything - {
        patches.MINIMUM_ROUND_TRIPS_PATCH,
        patches.ONE_MARKER_PATCH,
        patches.FORK_PATCH,
    }
    # The one marker stands for every patch declared before it, and for no later one.
    before = source.split("\nONE_MARKER_PATCH = ")[0]
    earlier = {vars(patches)[n] for n in declared if f"\n{n} = " in before}
    assert len(earlier) >= 20 and earlier < everything - {patches.ONE_MARKER_PATCH}
    assert patches.ONE_MARKER_COVERS == earlier


def test_release_0_2_folds_every_patch_declared_by_0_2_0_and_later_ones_are_asked_again() -> None:
    """Every declared patch id is in exactly one of ``FOLDED_AT_0_2`` (taken without a marker by runs
    begun on 0.2) and ``AFTER_0_2`` (asked with a marker by every run): a patch added later must say
    which, and the fold set is the explicit list, not derived from the ids declared."""
    declared = {vars(patches)[name] for name in patches.__all__ if name.endswith("_PATCH")}
    assert len(declared) >= 25
    assert patches.FOLDED_AT_0_2 | patches.AFTER_0_2 == declared
    assert not patches.FOLDED_AT_0_2 & patches.AFTER_0_2
    source = (WORKFLOWS / "patches.py").read_text()
    listing = source.split("\nFOLDED_AT_0_2 = frozenset(")[1].split("\n)")[0]
    assert "*" not in listing and len(re.findall(r"^\s+[A-Z_]+_PATCH,$", listing, re.M)) == len(
        patches.FOLDED_AT_0_2
    )
    # 0.1 folds nothing (its runs ask each patch, as their histories recorded), 0.2 all of the above.
    assert patches.FOLDED["0.1"] == frozenset() and patches.FOLDED["0.2"] == patches.FOLDED_AT_0_2


def test_release_0_4_folds_every_patch_declared_by_0_4_0() -> None:
    """0.3 folds what 0.2 folded and every patch declared after it (``short-wait-by-default``); 0.4
    folds what 0.3 did (none was declared between them); a patch declared after 0.4.0 goes to
    ``AFTER_0_4`` (none yet), so every declared id is folded by 0.4 or asked after it, never both.
    The lines are in order, and a run on a line has what that line and every earlier one brought
    (``on_line``), and nothing a later one brought."""
    declared = {vars(patches)[name] for name in patches.__all__ if name.endswith("_PATCH")}
    assert patches.FOLDED_AT_0_3 == patches.FOLDED_AT_0_2 | {patches.SHORT_WAIT_PATCH}
    assert patches.FOLDED_AT_0_4 == patches.FOLDED_AT_0_3 and not patches.AFTER_0_3
    assert patches.FOLDED_AT_0_4 | patches.AFTER_0_4 == declared
    assert not patches.FOLDED_AT_0_4 & patches.AFTER_0_4
    assert patches.FOLDED == {
        "0.1": frozenset(),
        "0.2": patches.FOLDED_AT_0_2,
        "0.3": patches.FOLDED_AT_0_3,
        "0.4": patches.FOLDED_AT_0_4,
    }
    assert patches.LINES == ("0.1", "0.2", "0.3", "0.4")
    settled, running = patches.SETTLED_VISIBILITY_LINE, patches.RUNNING_AT_ONCE_LINE
    assert [patches.on_line(settled, release=r) for r in patches.LINES] == [False, False, True, True]
    assert [patches.on_line(running, release=r) for r in patches.LINES] == [False, False, False, True]
    assert all(patches.on_line("0.1", release=r) for r in patches.LINES)
