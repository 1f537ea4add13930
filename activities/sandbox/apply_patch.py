"""Apply a patch in the ``*** Begin Patch`` envelope to the files under the current directory.

This file runs *inside the task's sandbox*, as ``python3 -c <this source>`` with the patch on stdin
(``activities.agent.sandbox_agents`` plans the ``apply_patch`` tool's calls that way), so the edit is
one contained, recorded sandbox command like any other. It uses the standard library only and runs on
Python 3.7 and later (whatever ``python3`` the sandbox image has).

The format is the one the OpenAI Agents SDK's ``apply_patch`` tool describes to the model::

    *** Begin Patch
    *** Add File: hello.txt
    +Hello world
    *** Update File: src/app.py
    *** Move to: src/main.py
    @@ def greet():
    -print("Hi")
    +print("Hello, world!")
    *** Delete File: obsolete.txt
    *** End Patch

Nothing is written unless every file operation applies. Applying the same patch twice changes
nothing the second time: a hunk whose old lines are gone and whose new lines are in place counts as
applied, an added file is written whole, a deleted file that is gone stays gone. So a command retried
after its worker died mid-way does not apply a change twice.

Every path stays in the work dir where the files really are: a symlink that an earlier command made
(to a file, a directory on the way, or nowhere yet) is followed as the write would follow it and a
real location outside the work dir is refused; deleting a symlink removes the link, never its
target. The check runs here, in the sandbox, for every backend.

Exit status: 0 applied (stdout lists ``A``/``M``/``D`` per path), 1 the patch is malformed or does
not match (stderr says where), nothing written.
"""

import os
import sys
import tempfile

BEGIN = "*** Begin Patch"
END = "*** End Patch"
ADD = "*** Add File: "
DELETE = "*** Delete File: "
UPDATE = "*** Update File: "
MOVE = "*** Move to: "
END_OF_FILE = "*** End of File"


class PatchError(Exception):
    """The patch is malformed, names a path outside the work dir, or does not match a file."""


def parse(text):
    """The patch's file operations: dicts with ``kind`` (add, delete, update), ``path`` and their
    lines (``lines`` for add; ``move`` and ``hunks`` for update)."""
    lines = text.splitlines()
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError(f"the patch must start with '{BEGIN}'")
    if len(lines) < 2 or lines[-1].strip() != END:
        raise PatchError(f"the patch must end with '{END}'")
    ops, current = [], None
    for number, line in enumerate(lines[1:-1], start=2):
        if line.startswith((ADD, DELETE, UPDATE)):
            header = next(h for h in (ADD, DELETE, UPDATE) if line.startswith(h))
            kind = {ADD: "add", DELETE: "delete", UPDATE: "update"}[header]
            current = {
                "kind": kind,
                "path": line[len(header) :].strip(),
                "lines": [],
                "move": None,
                "hunks": [],
            }
            if not current["path"]:
                raise PatchError(f"line {number}: a file header needs a path")
            ops.append(current)
        elif current is None:
            raise PatchError(f"line {number}: expected '{ADD}', '{UPDATE}' or '{DELETE}'")
        elif current["kind"] == "add":
            if not line.startswith("+"):
                raise PatchError(f"line {number}: every line of an added file starts with '+'")
            current["lines"].append(line[1:])
        elif current["kind"] == "delete":
            raise PatchError(f"line {number}: nothing follows '{DELETE}{current['path']}'")
        elif line.startswith(MOVE):
            if current["hunks"] or current["move"]:
                raise PatchError(f"line {number}: '{MOVE}' comes right after its file's header")
            current["move"] = line[len(MOVE) :].strip()
        elif line.startswith("@@"):
            current["hunks"].append({"anchor": line[2:].strip(), "lines": [], "eof": False})
        elif line.strip() == END_OF_FILE:
            if not current["hunks"]:
                raise PatchError(f"line {number}: '{END_OF_FILE}' ends a hunk, and there is none")
            current["hunks"][-1]["eof"] = True
        else:
            if not current["hunks"]:
                current["hunks"].append({"anchor": "", "lines": [], "eof": False})
            line = line or " "  # a blank context line whose leading space was lost
            if line[0] not in " +-":
                raise PatchError(f"line {number}: a hunk line starts with ' ', '-' or '+'")
            current["hunks"][-1]["lines"].append(line)
    for op in ops:
        if op["kind"] == "update" and not op["hunks"] and not op["move"]:
            raise PatchError(f"'{UPDATE}{op['path']}' has no hunk")
    if not ops:
        raise PatchError("the patch has no file operation")
    return ops


def resolve(root, path, link_itself=False):
    """Where ``path`` under ``root`` really is; a path that is absolute or leaves ``root`` is refused.

    ``root`` is a real path. Symlinks made earlier in the sandbox are followed the way the write
    would follow them (intermediate directories, the file itself, a dangling link's target), and the
    real location must stay under ``root``. With ``link_itself`` (a delete) the last component is
    not followed: a symlink is removed, never what it points to.
    """
    if os.path.isabs(path):
        raise PatchError(f"{path!r}: paths are relative to the work dir")
    full = os.path.normpath(os.path.join(root, path))
    if not inside(root, full):
        raise PatchError(f"{path!r} is outside the work dir")
    if link_itself:
        real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
    else:
        real = os.path.realpath(full)
    if not inside(root, real):
        raise PatchError(f"{path!r} is outside the work dir (through a symlink)")
    return real


def inside(root, full):
    return full == root or full.startswith(root.rstrip(os.sep) + os.sep)


def read_lines(full, path):
    try:
        with open(full, encoding="utf-8") as f:
            content = f.read()
    except FileNotFoundError:
        raise PatchError(f"{path!r} does not exist") from None
    except UnicodeDecodeError:
        raise PatchError(f"{path!r} is not UTF-8 text") from None
    if content.endswith("\n"):
        content = content[:-1]
    return content.split("\n") if content else []


def find(lines, wanted, start, at_end):
    """Where ``wanted`` occurs in ``lines`` from ``start`` (only at the very end with ``at_end``):
    exactly first, then ignoring trailing, then surrounding whitespace. -1: nowhere."""
    size = len(wanted)
    last = len(lines) - size
    places = [last] if at_end else range(start, last + 1)
    for norm in (lambda s: s, str.rstrip, str.strip):
        target = [norm(s) for s in wanted]
        for i in places:
            if i >= start and [norm(s) for s in lines[i : i + size]] == target:
                return i
    return -1


def update(lines, hunks, path):
    """``lines`` with ``hunks`` applied, and whether every hunk was already in place."""
    lines, cursor, already = list(lines), 0, True
    for number, hunk in enumerate(hunks, start=1):
        if hunk["anchor"]:
            at = next((i for i in range(cursor, len(lines)) if lines[i].strip() == hunk["anchor"]), -1)
            if at < 0:
                raise PatchError(f"{path!r}: hunk {number}: no line '{hunk['anchor']}' after line {cursor}")
            cursor = at + 1
        old = [s[1:] for s in hunk["lines"] if s[0] in " -"]
        new = [s[1:] for s in hunk["lines"] if s[0] in " +"]
        if old == new:
            continue
        if not old:
            if find(lines, new, cursor, hunk["eof"]) >= 0:
                continue
            at = len(lines) if hunk["eof"] or not hunk["anchor"] else cursor
            lines[at:at] = new
            cursor, already = at + len(new), False
            continue
        at = find(lines, old, cursor, hunk["eof"])
        if at < 0:
            done = find(lines, new, cursor, hunk["eof"]) if new else -1
            if done < 0:
                raise PatchError(f"{path!r}: hunk {number} does not match the file (from line {cursor + 1})")
            cursor = done + len(new)
            continue
        lines[at : at + len(old)] = new
        cursor, already = at + len(new), False
    return lines, already


def plan(ops, root):
    """What to write (path -> lines, None to delete) and the summary lines, before anything changes."""
    writes, summary = {}, []
    for op in ops:
        path = op["path"]
        full = resolve(root, path, link_itself=op["kind"] == "delete")
        if op["kind"] == "add":
            writes[full] = op["lines"]
            summary.append("A " + path)
        elif op["kind"] == "delete":
            gone = not os.path.lexists(full)
            writes[full] = None
            summary.append("D " + path + (" (already gone)" if gone else ""))
        else:
            target = resolve(root, op["move"]) if op["move"] else full
            source = full
            if op["move"] and not os.path.exists(full) and os.path.exists(target):
                source = target  # moved by an earlier run of this patch
            lines, already = update(read_lines(source, path), op["hunks"], path)
            writes[target] = lines
            if target != source:
                writes[source] = None
            shown = path if target == full else "{} -> {}".format(path, op["move"])
            summary.append("M " + shown + (" (already applied)" if already and source == target else ""))
    return writes, summary


def write(writes):
    for full, lines in writes.items():
        if lines is None:
            if os.path.lexists(full):
                os.remove(full)  # a symlink: the link, not its target
            continue
        os.makedirs(os.path.dirname(full) or ".", exist_ok=True)
        # A fresh name (O_EXCL), so a planted symlink at a guessable temporary name is never followed.
        handle, temporary = tempfile.mkstemp(prefix=".aw-patch-", dir=os.path.dirname(full))
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n" if lines else "")
        os.chmod(temporary, mode_for(full))
        os.replace(temporary, full)


def mode_for(full):
    """The mode ``full`` has, or a new file's mode under the current umask."""
    try:
        return os.stat(full).st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def main(text, root):
    """Apply ``text`` under ``root``; the exit status."""
    try:
        writes, summary = plan(parse(text), os.path.realpath(root))
    except PatchError as err:
        sys.stderr.write(f"apply_patch: {err}; nothing was changed\n")
        return 1
    write(writes)
    sys.stdout.write("Done!\n" + "\n".join(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.stdin.read(), os.getcwd()))
