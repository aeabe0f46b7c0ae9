"""What the names of model_new.py refer to, and which of its functions are on the forward path.

:class:`Names` resolves expressions to dotted names through the file's imports and module-level aliases
(``import torch.nn.functional as F``, ``from torch import relu``, ``act = torch.relu``), so a rule sees
``torch.nn.functional.relu`` however it is spelled. :func:`forward_path_functions` decides which functions
the forward's rules hold for: all but ``__init__``, the task's ``get_inputs``/``get_init_inputs`` and what
only they call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from cudagym.integrity import vocabulary as V
from cudagym.integrity.tensor_flow import walk_own

EXTENSION_MODULE = "cuda_extension"
LOADERS = ("torch.utils.cpp_extension.load_inline", "torch.utils.cpp_extension.load")
EXEMPT_FUNCTIONS = ("get_inputs", "get_init_inputs")


def under(path: str, names: Iterable[str]) -> bool:
    """Whether dotted ``path`` is one of ``names`` or inside one (``torch.testing.x`` under ``torch.testing``)."""
    return any(path == n or path.startswith(n + ".") for n in names)


class Names:
    """Resolves expressions to dotted names through imports and module-level aliases."""

    def __init__(self, tree: ast.Module) -> None:
        self.bound: dict[str, str] = {}
        self.extensions: set[str] = {EXTENSION_MODULE}
        self.values: dict[str, list[ast.expr]] = {}  # module-level name -> the values assigned to it
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    top = alias.name.split(".")[0]
                    self.bound[alias.asname or top] = alias.name if alias.asname else top
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    self.bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in tree.body:  # `act = torch.relu`, `ext = load_inline(...)`, `cuda_src = "..."`
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                name, value = node.targets[0].id, node.value
                self.values.setdefault(name, []).append(value)
                if isinstance(value, ast.Call):
                    if under(self.resolve(value.func) or "", LOADERS):
                        self.extensions.add(name)
                elif (path := self.resolve(value)) is not None:
                    self.bound.setdefault(name, path)

    def resolve(self, node: ast.AST) -> str | None:
        """``torch.nn.functional.relu`` for ``F.relu``; None for anything not an imported name's chain."""
        if isinstance(node, ast.Name):
            return EXTENSION_MODULE if node.id in self.extensions else self.bound.get(node.id)
        if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            importer = node.func.id if isinstance(node.func, ast.Name) else self.resolve(node.func)
            if importer in ("__import__", "importlib.import_module") and isinstance(node.args[0].value, str):
                return node.args[0].value  # __import__("os").fork is os.fork
            return None
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            return f"{base}.{node.attr}" if base is not None else None
        return None


def forward_path_functions(tree: ast.Module) -> dict[ast.AST, bool]:
    """Every function and lambda of the module, mapped to whether it is on the forward path.

    Off the path: every ``__init__``, the module-level ``get_inputs``/``get_init_inputs``, and the methods
    and module functions they *call* (``self.reset_parameters()``, ``self.apply(_init_weights)``), as long
    as nothing on the path refers to them and they are not handed anywhere else: a method that ``__init__``
    only names (``self.fn = self.helper``, ``self.register_forward_hook(self._hook)``) may run at any time,
    so it is held to the forward's rules, and so is an ``__init__`` the forward path calls.
    """
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    functions: dict[ast.AST, bool] = {n: True for n in ast.walk(tree) if isinstance(n, kinds)}
    module_level = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    methods_of: dict[ast.AST, dict[str, ast.AST]] = {}
    class_names: dict[ast.AST, str] = {}
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        methods = {m.name: m for m in cls.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))}
        methods_of.update(dict.fromkeys(methods.values(), methods))
        class_names.update(dict.fromkeys(methods.values(), cls.name))
    roots = [m for m, methods in methods_of.items() if methods.get("__init__") is m]
    roots += [f for name, f in module_level.items() if name in EXEMPT_FUNCTIONS]

    def targets(function: ast.AST) -> tuple[set[ast.AST], set[ast.AST]]:
        """(functions ``function`` calls, functions it refers to otherwise)."""
        calls, others = _references(function, class_names.get(function, ""))
        methods = methods_of.get(function, {})

        def resolve(names: set[str]) -> set[ast.AST]:
            return {module_level[n] for n in names if n in module_level} | {methods[n] for n in names if n in methods}

        return resolve(calls), resolve(others)

    reached, frontier = set(roots), list(roots)
    escaping: set[ast.AST] = set()
    while frontier:
        called, named = targets(frontier.pop())
        escaping |= named
        for target in called - reached:
            reached.add(target)
            frontier.append(target)
    elsewhere = set().union(*(c | o for f in functions if f not in reached for c, o in [targets(f)]))
    for function in reached:
        functions[function] = function in elsewhere or (function in escaping and function not in roots)
    return functions


def _references(function: ast.AST, class_name: str) -> tuple[set[str], set[str]]:
    """(names ``function``'s own body calls, names it refers to otherwise): bare names, ``self.<name>``,
    ``<its class>.<name>``, ``type(self).<name>`` and ``getattr(self, "<name>")``. Functions given to
    ``.apply`` are called."""
    calls: set[str] = set()
    others: set[str] = set()
    for node in walk_own(function):
        name = _referenced_name(node, class_name)
        if name is None:
            continue
        parent = getattr(node, "_parent", None)
        called = isinstance(parent, ast.Call) and parent.func is node
        applied = isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute)
        applied = applied and parent.func.attr in V.INIT_APPLIERS and node in parent.args
        (calls if called or applied else others).add(name)
    return calls, others


def _referenced_name(node: ast.AST, class_name: str) -> str | None:
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        owner = node.value
        if isinstance(owner, ast.Name) and owner.id in ("self", "cls", class_name):
            return node.attr
        if isinstance(owner, ast.Call) and isinstance(owner.func, ast.Name) and owner.func.id == "type":
            return node.attr
        if isinstance(owner, ast.Attribute) and owner.attr == "__class__":
            return node.attr
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr"):
        if len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            return node.args[1].value
    return None
