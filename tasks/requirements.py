"""What a task needs beyond cudagym's own dependencies, and whether this machine has it.

A task's ``metadata.requires`` names the extra Python packages its reference imports (KernelBench's
level 4 needs ``transformers``). Loaders fill it from the source's imports (:func:`imported_packages`)
so that a task set can be loaded anywhere and the tasks that cannot run here are *flagged*, not
dropped: :func:`missing_requirements` says which packages are absent, :func:`requirement_notes` adds
what cannot be checked locally (model weights that must be downloaded on first use).
"""

from __future__ import annotations

import ast
import importlib.util
import sys

from cudagym import python_source
from cudagym.tasks.task import Task

#: Top-level packages that every cudagym installation has (the package's own dependencies).
BASE_PACKAGES = frozenset({"torch", "numpy", "gymnasium", "pydantic", "ninja", "pybind11", "cudagym"})

#: ``metadata.extra`` key set by loaders whose tasks fetch pretrained weights when constructed.
NEEDS_WEIGHTS_KEY = "needs_weights"


def imported_packages(source: str) -> tuple[str, ...]:
    """The third-party top-level packages ``source`` imports, in order of first import.

    Standard-library modules and :data:`BASE_PACKAGES` are left out, as are relative imports. A source
    that does not parse imports nothing as far as this function can tell.

    Args:
        source: Python source text.

    Returns:
        Distinct top-level import names, e.g. ``("transformers",)``.
    """
    try:
        tree = python_source.parse(source)
    except SyntaxError:
        return ()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top in BASE_PACKAGES or top in sys.stdlib_module_names or top in found:
                continue
            found.append(top)
    return tuple(found)


def _importable(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def missing_requirements(task: Task) -> list[str]:
    """The packages in ``task.metadata.requires`` that cannot be imported here.

    An empty list means the task's imports will resolve; it does not guarantee that pretrained weights
    are reachable (see :func:`requirement_notes`).

    Args:
        task: any task.

    Returns:
        Package names, in the order the metadata lists them, e.g. ``["transformers"]``.
    """
    return [package for package in task.metadata.requires if not _importable(package)]


def requirement_notes(task: Task) -> list[str]:
    """Human-readable reasons why ``task`` may not run on this machine; empty when none are known.

    Args:
        task: any task.

    Returns:
        One line per problem: each missing package (with the pip command that installs it), and, for
        tasks flagged with ``metadata.extra["needs_weights"]``, a reminder that the weights are
        downloaded from the Hugging Face Hub on first use (network access or a warm cache needed).
    """
    notes = [f"needs the package {p!r} (pip install {p})" for p in missing_requirements(task)]
    if task.metadata.extra.get(NEEDS_WEIGHTS_KEY):
        notes.append(
            "builds a pretrained Hugging Face model: its weights must be downloadable "
            "(network access) or already in the local Hugging Face cache"
        )
    return notes
