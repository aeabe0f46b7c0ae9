"""The workspace's headers as a single-file solution's compiles see them (``cudagym.inline_build``).

A ``load_inline``/``load`` request's objects are keyed by the request's own text, its flags and a digest of the
workspace's headers (``kernels/*.h``, ``.cuh``, ``.hpp``): the files its ``extra_include_paths`` may reach. Its
compilers must then read exactly those bytes. They never see the workspace itself, which changes while a stale build
still runs (an environment answered at its deadline goes on writing the agent's files) and which holds files no key
covers (``model_new.py``, which C++ and Python can both parse, and the kernel sources): the headers are read once and
copied into a folder named by their content, ``<cache>/workspace-headers/<digest>/kernels/<name>``, written once by
the trusted process, and the request's include paths name the same places inside that copy.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from cudagym.build import content_hash, write_folder_once
from cudagym.errors import CudaGymError
from cudagym.workspace import Workspace

HEADER_SUFFIXES = (".h", ".cuh", ".hpp")
PORTABLE_ROOT = "<ws>"  # how commands' keys spell the copy's folder (the same files give the same key anywhere)


class OutsideWorkspace(CudaGymError, ValueError):
    """An include path that leads out of the workspace."""


@dataclasses.dataclass(frozen=True)
class WorkspaceHeaders:
    """The workspace's headers read once: ``root`` holds ``kernels/<name>`` for each, ``digest`` names their names
    and bytes (part of every single-file compile's key), ``workspace`` is the folder they were read from (include
    paths are resolved against it)."""

    workspace: Path
    root: Path
    digest: str

    @classmethod
    def take(cls, workspace: Workspace, cache_dir: Path) -> WorkspaceHeaders:
        """Reads ``workspace``'s headers and returns their copy under ``cache_dir`` (made the first time)."""
        headers = workspace.headers(HEADER_SUFFIXES)
        digest = content_hash(*(name.encode() + b"\0" + data for name, data in headers))
        copies = [(f"kernels/{name}", data) for name, data in headers]
        root = write_folder_once(cache_dir / "workspace-headers" / digest[:32], copies)
        return cls(workspace.path.resolve(), root, digest)

    def include_flag(self, path: str) -> str:
        """The ``-I`` flag of a request's include ``path`` (relative to the workspace, or absolute inside it): the
        same place inside the copy. Raises OutsideWorkspace where ``path`` leads out of the workspace."""
        resolved = (self.workspace / path).resolve()
        if not resolved.is_relative_to(self.workspace):
            raise OutsideWorkspace(f"{path!r} lies outside the workspace")
        return f"-I{os.path.normpath(self.root / resolved.relative_to(self.workspace))}"

    def portable(self, flag: str) -> str:
        """``flag`` with the copy's folder spelt the same for every copy of the same headers."""
        return flag.replace(str(self.root), PORTABLE_ROOT)
