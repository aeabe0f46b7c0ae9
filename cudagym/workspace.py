"""The episode's workspace: one temporary directory in CUDA Agent's layout, with guarded file access.

Fixed files (written by cudagym, never writable through the tools): ``model.py`` (the task's reference),
``binding.cpp`` and ``binding_registry.h`` (the module ``cuda_extension`` and its ``REGISTER_BINDING``
macro) and ``INSTRUCTIONS.md``. Writable: ``model_new.py`` and ``kernels/<name>`` with a ``.cu``,
``.cuh``, ``.cpp`` or ``.h`` ending. Paths that leave the workspace, go through a symlink, name
another file or exceed the size limits are refused with a message saying why.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import shutil
import stat
import tempfile
import weakref
from pathlib import Path, PurePosixPath

from cudagym.errors import CudaGymError
from cudagym.text import find_shown, unescape

TEMPLATES = Path(__file__).resolve().parent / "templates"
FIXED_FILES = ("model.py", "binding.cpp", "binding_registry.h", "INSTRUCTIONS.md")
KERNEL_SUFFIXES = (".cu", ".cuh", ".cpp", ".h")
_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
WORKSPACE_PREFIX = "cudagym-ws-"


class WorkspaceError(CudaGymError):
    """A file operation was refused; the message is safe to show to the agent."""


@dataclasses.dataclass(frozen=True)
class WorkspaceLimits:
    """Bounds on what the agent may store."""

    max_file_bytes: int = 256 * 1024
    max_total_bytes: int = 4 * 1024 * 1024
    max_files: int = 64


@dataclasses.dataclass(frozen=True)
class WorkspaceSnapshot:
    """A workspace's content at one moment, to evaluate it on another machine (``Workspace.freeze``/``thaw``).

    Attributes:
        fixed: the fixed files' original content, by name.
        changed_fixed: the fixed files that differ on disk from their original: their content, or None where the
            file is missing or is not a regular file.
        files: the agent's files (``model_new.py``, ``kernels/*``) by relative path.
        limits: the workspace's size limits.
        path: where the workspace was (results name it instead of the copy's directory).
    """

    fixed: dict[str, bytes]
    changed_fixed: dict[str, bytes | None]
    files: dict[str, bytes]
    limits: WorkspaceLimits
    path: str


class Workspace:
    """A temporary directory holding one episode's files.

    Args:
        model_source: the reference ``model.py`` text (already sized for the backend).
        instructions: the text of ``INSTRUCTIONS.md``.
        root_dir: where to create the directory (default: the system temp dir).
        limits: size limits for writable files.
    """

    def __init__(
        self,
        model_source: str,
        instructions: str,
        *,
        root_dir: str | Path | None = None,
        limits: WorkspaceLimits | None = None,
    ) -> None:
        fixed = {
            "model.py": model_source.encode(),
            "binding.cpp": (TEMPLATES / "binding.cpp").read_bytes(),
            "binding_registry.h": (TEMPLATES / "binding_registry.h").read_bytes(),
            "INSTRUCTIONS.md": instructions.encode(),
        }
        self._create(fixed, root_dir, limits or WorkspaceLimits())

    def _create(self, fixed: dict[str, bytes], root_dir: str | Path | None, limits: WorkspaceLimits) -> None:
        """Makes the directory and writes the fixed files (``fixed``: their original content)."""
        self.limits = limits
        self.path = Path(tempfile.mkdtemp(prefix=WORKSPACE_PREFIX, dir=root_dir)).resolve()
        # removes the directory when the workspace is dropped (or at exit) without remove(): an env whose close() an
        # exception skipped leaves nothing in /tmp
        self._finalizer = weakref.finalize(self, _remove_tree, self.path)
        (self.path / "kernels").mkdir()
        self._fixed_content: dict[str, bytes] = dict(fixed)
        self._fixed_hash = {name: hashlib.sha256(data).hexdigest() for name, data in self._fixed_content.items()}
        self.restore_fixed()

    # -- snapshots (evaluation elsewhere: cudagym.ray_pool) ------------------------------------------

    def freeze(self) -> WorkspaceSnapshot:
        """A fixed copy of what an evaluation reads: the agent's files, the fixed files' original content and those
        fixed files that changed on disk since (their content now, None where one is missing or not a file)."""
        changed: dict[str, bytes | None] = {}
        for name in self.tampered_fixed():
            target = self.path / name
            is_file = target.is_file() and not target.is_symlink()
            changed[name] = target.read_bytes() if is_file else None
        return WorkspaceSnapshot(
            fixed=dict(self._fixed_content),
            changed_fixed=changed,
            files=self.snapshot(),
            limits=self.limits,
            path=str(self.path),
        )

    @classmethod
    def thaw(cls, snapshot: WorkspaceSnapshot, *, root_dir: str | Path | None = None) -> Workspace:
        """A new workspace directory holding what ``snapshot`` holds, changed fixed files included (so that the
        evaluator finds them changed, as it would have in the original)."""
        workspace = cls.__new__(cls)
        workspace._create(dict(snapshot.fixed), root_dir, snapshot.limits)
        for name, data in snapshot.files.items():
            rel = workspace._relative(name)
            problem = workspace.writable_error(rel)
            if problem:
                workspace.remove()
                raise WorkspaceError(problem)
            target = workspace.path / rel
            target.parent.mkdir(exist_ok=True)
            workspace._write_bytes(target, data)
        for name, content in snapshot.changed_fixed.items():
            if name not in workspace._fixed_content:
                workspace.remove()
                raise WorkspaceError(f"{name} is not a fixed file of the workspace")
            target = workspace.path / name
            target.chmod(0o644)
            if content is None:
                target.unlink()
            else:
                target.write_bytes(content)
        return workspace

    # -- fixed files -------------------------------------------------------------------------------

    def restore_fixed(self) -> None:
        """(Re)writes every fixed file with its original content, read-only."""
        for name, data in self._fixed_content.items():
            target = self.path / name
            if target.is_symlink() or target.is_dir():
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                else:
                    target.unlink()
            if target.exists():
                target.chmod(0o644)
            target.write_bytes(data)
            target.chmod(0o444)

    def tampered_fixed(self) -> list[str]:
        """Names of fixed files whose content, type or presence changed since they were written."""
        changed = []
        for name, digest in self._fixed_hash.items():
            target = self.path / name
            try:
                if target.is_symlink() or not target.is_file():
                    changed.append(name)
                elif hashlib.sha256(target.read_bytes()).hexdigest() != digest:
                    changed.append(name)
            except OSError:
                changed.append(name)
        return changed

    # -- path rules --------------------------------------------------------------------------------

    def _relative(self, path: str) -> PurePosixPath:
        if not isinstance(path, str) or not path.strip():
            raise WorkspaceError("The path is empty.")
        if len(path) > 1024 or any(len(part.encode()) > 255 for part in path.split("/")):
            raise WorkspaceError("The path is too long (at most 255 bytes per name, 1024 in all).")
        if "\x00" in path:
            raise WorkspaceError("The path contains a NUL byte.")
        raw = PurePosixPath(path.strip().replace("\\", "/"))
        if raw.is_absolute():
            raise WorkspaceError(f"{path!r} is absolute; use a path relative to the workspace, e.g. kernels/x.cu.")
        parts = [p for p in raw.parts if p not in ("", ".")]
        if any(p == ".." for p in parts):
            raise WorkspaceError(f"{path!r} leaves the workspace ('..' is not allowed).")
        if not parts:
            raise WorkspaceError(f"{path!r} names the workspace itself, not a file.")
        return PurePosixPath(*parts)

    def _no_symlink_on_the_way(self, rel: PurePosixPath) -> Path:
        current = self.path
        for part in rel.parts:
            current = current / part
            if current.is_symlink():
                raise WorkspaceError(f"{rel} goes through a symlink; symlinks are not allowed in the workspace.")
        return current

    def writable_error(self, rel: PurePosixPath) -> str | None:
        """Why ``rel`` may not be written, or None when it may."""
        name = str(rel)
        if name in FIXED_FILES:
            return f"{name} is a fixed file of the workspace and cannot be changed."
        if name == "model_new.py":
            return None
        if len(rel.parts) == 2 and rel.parts[0] == "kernels":
            if not _NAME_RE.match(rel.parts[1]):
                return f"{name}: file names may use letters, digits, '_', '-' and '.' only."
            if rel.suffix in KERNEL_SUFFIXES:
                return None
            return f"{name}: kernel files must end in {', '.join(KERNEL_SUFFIXES)}."
        return (
            f"{name} is outside the writable set; you may write model_new.py and kernels/<name> "
            f"with an ending in {', '.join(KERNEL_SUFFIXES)}."
        )

    def _writable_target(self, path: str) -> tuple[PurePosixPath, Path]:
        rel = self._relative(path)
        problem = self.writable_error(rel)
        if problem:
            raise WorkspaceError(problem)
        return rel, self._no_symlink_on_the_way(rel)

    # -- file operations ---------------------------------------------------------------------------

    def _check_sizes(self, target: Path, new_size: int) -> None:
        if new_size > self.limits.max_file_bytes:
            raise WorkspaceError(
                f"The file would be {new_size} bytes; the limit is {self.limits.max_file_bytes} bytes per file."
            )
        files = [p for p in self.writable_files() if p != target]
        if not target.exists() and len(files) + 1 > self.limits.max_files:
            raise WorkspaceError(f"The workspace may hold at most {self.limits.max_files} writable files.")
        total = sum(p.stat().st_size for p in files) + new_size
        if total > self.limits.max_total_bytes:
            raise WorkspaceError(
                f"Writable files would total {total} bytes; the limit is {self.limits.max_total_bytes} bytes."
            )

    def _write_bytes(self, target: Path, data: bytes) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(target, flags, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(data)

    def write(self, path: str, content: str) -> tuple[str, int]:
        """Creates or replaces a writable file; returns (relative path, bytes written)."""
        rel, target = self._writable_target(path)
        data = content.encode("utf-8", errors="replace")
        self._check_sizes(target, len(data))
        if target.exists() and not target.is_file():
            raise WorkspaceError(f"{rel} exists and is not a regular file.")
        self._write_bytes(target, data)
        return str(rel), len(data)

    def edit(self, path: str, old: str, new: str) -> tuple[str, int]:
        """Replaces the single occurrence of ``old`` by ``new``; returns (relative path, line of the edit).

        ``old`` is looked for in the file's text as it is; where it is not there, in the text as observations show
        it (``cudagym.text.to_printable``: characters outside printable ASCII as ``\\u00e9`` escapes), and then
        ``new`` is read the same way (its escapes become the characters), so an edit copied from a ``read_file``
        observation applies to the file's real text."""
        rel, target = self._writable_target(path)
        if not target.is_file():
            raise WorkspaceError(f"{rel} does not exist; create it with write_file first.")
        text = target.read_text(encoding="utf-8", errors="replace")
        count = text.count(old)
        if count:
            start = text.index(old)
            end = start + len(old)
        else:  # not in the text as it is: as observations show it, and new_string is read the same way
            spans = find_shown(text, old)
            count, new = len(spans), unescape(new)
            start, end = spans[0] if spans else (0, 0)
        if count == 0:
            raise WorkspaceError(
                f"old_string was not found in {rel}. It must match the file exactly, whitespace included; "
                f"use read_file to see the current text."
            )
        if count > 1:
            raise WorkspaceError(
                f"old_string occurs {count} times in {rel}; include more surrounding text so it is unique."
            )
        updated = text[:start] + new + text[end:]
        data = updated.encode("utf-8", errors="replace")
        self._check_sizes(target, len(data))
        self._write_bytes(target, data)
        return str(rel), text[:start].count("\n") + 1

    def read(self, path: str, offset: int = 1, limit: int = 400) -> tuple[str, str]:
        """Returns (relative path, numbered lines ``offset``..``offset+limit-1``)."""
        rel = self._relative(path)
        target = self._no_symlink_on_the_way(rel)
        if not target.exists():
            raise WorkspaceError(f"{rel} does not exist. Files: {', '.join(self.listing_names())}.")
        if not target.is_file():
            raise WorkspaceError(f"{rel} is not a regular file.")
        if target.stat().st_size > 4 * self.limits.max_file_bytes:
            raise WorkspaceError(f"{rel} is too large to read ({target.stat().st_size} bytes).")
        # split at newlines only: str.splitlines would also break at \x0b, \x1c, \x85, \u2028 ..., which the
        # observation shows as characters (escaped), so that the lines are the file's
        text = target.read_text(encoding="utf-8", errors="replace")
        lines = text.removesuffix("\n").split("\n") if text else []
        if not lines:
            return str(rel), "(empty file)"
        if offset > len(lines):
            raise WorkspaceError(f"{rel} has {len(lines)} lines; offset {offset} is past the end.")
        chosen = lines[offset - 1 : offset - 1 + limit]
        width = len(str(offset + len(chosen)))
        numbered = [f"{i:>{width}}| {line}" for i, line in enumerate(chosen, start=offset)]
        rest = len(lines) - (offset - 1 + len(chosen))
        if rest > 0:
            numbered.append(f"... {rest} more lines (read with offset={offset + len(chosen)})")
        return str(rel), "\n".join(numbered)

    def writable_files(self) -> list[Path]:
        """The agent's files: model_new.py and kernels/* (regular files only)."""
        files = [self.path / "model_new.py"] if (self.path / "model_new.py").is_file() else []
        kernels = self.path / "kernels"
        if kernels.is_dir() and not kernels.is_symlink():
            files += sorted(p for p in kernels.iterdir() if p.is_file() and not p.is_symlink())
        return files

    def listing_names(self) -> list[str]:
        return [*FIXED_FILES, *(str(p.relative_to(self.path)) for p in self.writable_files())]

    def listing(self) -> str:
        """One line per file: path, size, fixed or writable."""
        rows = []
        for name in FIXED_FILES:
            target = self.path / name
            size = target.stat().st_size if target.is_file() else 0
            rows.append(f"{name:<32} {size:>8} bytes  fixed")
        for p in self.writable_files():
            rows.append(f"{p.relative_to(self.path)!s:<32} {p.stat().st_size:>8} bytes  writable")
        if not self.writable_files():
            rows.append("(no files of yours yet: write kernels/*.cu|*.cpp and model_new.py)")
        return "\n".join(rows)

    def kernel_sources(self) -> list[Path]:
        """Translation units to compile: kernels/*.cu and kernels/*.cpp."""
        return [p for p in self.writable_files() if p.suffix in (".cu", ".cpp")]

    def headers(self, suffixes: tuple[str, ...]) -> list[tuple[str, bytes]]:
        """The agent's headers of ``suffixes`` (kernels/<name>), read now: (name, bytes), sorted by name. One removed
        since the listing (the agent writes on while a stale build reads) is read as it is now: absent."""
        found = []
        for path in self.writable_files():
            if path.suffix in suffixes:
                try:
                    found.append((path.name, path.read_bytes()))
                except OSError:
                    continue
        return sorted(found)

    def snapshot(self) -> dict[str, bytes]:
        """The agent's files by relative path (for hashing builds and recording trajectories)."""
        return {str(p.relative_to(self.path)): p.read_bytes() for p in self.writable_files()}

    def remove(self) -> None:
        """Deletes the workspace directory (idempotent)."""
        self._finalizer()


def _remove_tree(path: Path) -> None:
    """Deletes a workspace directory, read-only files included (they are made writable first)."""
    if path.exists():
        for root, dirs, files in os.walk(path):
            for name in dirs + files:
                p = os.path.join(root, name)
                if not os.path.islink(p):
                    os.chmod(p, stat.S_IRWXU)
        shutil.rmtree(path, ignore_errors=True)
