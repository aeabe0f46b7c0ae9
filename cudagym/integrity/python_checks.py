"""Static checks on model_new.py through Python's ``ast``.

Names are resolved through the file's imports and module-level aliases (:mod:`cudagym.integrity.python_names`),
so a rule sees ``torch.nn.functional.relu`` however it is spelled. The *forward path* is every function body
except ``__init__`` (with the methods only ``__init__`` calls, such as ``reset_parameters``) and the
module-level ``get_inputs`` / ``get_init_inputs`` some solutions copy from the task: helpers, lambdas,
nested functions and methods ``__init__`` only names are held to the forward's rules (see
:mod:`cudagym.integrity.tensor_flow`), and so
are the values default arguments, decorators and class bodies hold (``t=torch``, ``act = torch.relu``).
Hooks are refused outright. C/C++/CUDA sources in strings (``load_inline``'s ``cpp_sources``/
``cuda_sources``, or any string that looks like C++) and the macros its ``-D`` flags define are collected
as :attr:`PythonChecker.cpp_sources`, checked as C++ with the workspace's other sources.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from pathlib import PurePosixPath

from cudagym import python_source
from cudagym.integrity import vocabulary as V
from cudagym.integrity.cpp_checks import check_cpp_sources, escapes
from cudagym.integrity.cpp_preprocess import CppSource
from cudagym.integrity.policy import IntegrityPolicy, Violation
from cudagym.integrity.python_names import EXTENSION_MODULE, LOADERS, Names, forward_path_functions, under
from cudagym.integrity.tensor_flow import TensorFlow, walk_own

CPP_SOURCE_ARGS = {"cpp_sources": 1, "cuda_sources": 2}  # keyword -> position in load_inline's signature
FLAG_ARGS = ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths", "build_directory")
_CPP_HINT_RE = re.compile(
    r"__global__|#\s*include\s*[<\"]|torch::|at::|PYBIND11_MODULE|<<<|\bcu[A-Za-z]+\s*\(|extern \"C\""
)
_BLOB_RE = re.compile(r"[A-Za-z0-9+/=]{256,}|(?:[0-9a-fA-F]{2}){128,}")
_BINARY_PATH_RE = re.compile(r"\.(so(\.\d+)*|cubin|fatbin|ptx|o|a|dll|dylib|pt|pth|pkl|pickle|npy|npz)$")
_UNSAFE_FLAG_RE = re.compile(
    r"^(-L|-Wl,|-Xlinker|-B|-fplugin|-specs|--specs|-include|-imacros|-ccbin|--compiler-bindir)"
)


class PythonChecker:
    """Collects the violations of one Python source."""

    def __init__(self, source: str, path: str, policy: IntegrityPolicy, known_files: Iterable[str] = ()) -> None:
        self.source = source
        self.path = path
        self.policy = policy
        self.known = tuple(known_files)
        self.found: list[Violation] = []
        self.cpp_sources: list[CppSource] = []

    def flag(self, rule: str, node: ast.AST, what: str) -> None:
        if self.policy.enabled(rule):
            self.found.append(Violation(rule, self.path, getattr(node, "lineno", 1), what))

    def run(self) -> list[Violation]:
        try:
            tree = python_source.parse(self.source)
        except (SyntaxError, ValueError):
            return []  # it cannot run either; loading it reports the error and its line
        except (RecursionError, MemoryError):
            return [Violation("checkable", self.path, 1, "the file is nested too deeply to be parsed")]
        try:
            return self._analyse(tree)
        except RecursionError:  # a 10,000-term expression or attribute chain: refused, never waved through
            return [Violation("checkable", self.path, 1, "an expression is nested too deeply for the checks")]

    def _analyse(self, tree: ast.Module) -> list[Violation]:
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                child._parent = node  # type: ignore[attr-defined]
        self.names = Names(tree)
        functions = forward_path_functions(tree)
        self.flow = TensorFlow(tree, self.names, list(functions))
        self.cpp_strings = self._cpp_source_strings(tree)
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            self.anywhere(node, docstrings)
        for function, forward in functions.items():
            if forward:
                self.forward_path(function)
        self.values_at_definition(tree)
        if self.policy.enabled("extension_called"):
            self.extension_called(tree, [f for f, forward in functions.items() if forward])
        return self.found

    # -- rules that hold anywhere in the file ------------------------------------------------------

    def anywhere(self, node: ast.AST, docstrings: set[int]) -> None:
        if isinstance(node, (ast.Try, ast.TryStar)) and node.handlers and not self.policy.allow_exception_handling:
            self.flag("exception_fallback", node, "try/except around code (a fallback would hide a failing kernel)")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            self.imports(node)
        elif isinstance(node, ast.ClassDef):
            self.class_def(node)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name in V.TENSOR_HOOK_NAMES:
            self.flag("tensor_subclass", node, f"defines {node.name} (a tensor subclass hook)")
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            self.name_use(node)
        elif isinstance(node, ast.Attribute):
            self.attribute_use(node)
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
            for target in targets:
                for sub in ast.walk(target) if isinstance(target, (ast.Tuple, ast.List)) else [target]:
                    self.assignment(sub)
        elif isinstance(node, ast.Call):
            self.call_anywhere(node)
        elif isinstance(node, ast.Constant):
            self.constant(node, id(node) in docstrings)

    def imports(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.level:
            self.flag("reference_model", node, "a relative import (model_new.py is loaded on its own)")
            return
        if isinstance(node, ast.ImportFrom):
            modules = [f"{node.module}.{a.name}" for a in node.names]
        else:
            modules = [a.name for a in node.names]
        for module in modules:
            self.module_name(node, module, "imports")

    def module_name(self, node: ast.AST, module: str, verb: str) -> None:
        """Rules on a module or object that is imported or used by its dotted name."""
        if under(module, ("model",)) or module.endswith(".Model"):
            self.flag("reference_model", node, f"{verb} {module} (the reference model.py)")
        elif under(module, V.CONCURRENCY_MODULES) or module in V.CONCURRENCY_NAMES:
            self.flag("concurrency", node, f"{verb} {module} (threads and processes belong to the harness)")
        elif under(module, V.LOADER_MODULES) or under(module, V.LOADER_NAMES):
            self.flag("binary_loading", node, f"{verb} {module} (a loader or decoder of prebuilt code or data)")
        elif under(module, V.INTROSPECTION_MODULES) or under(module, V.INTROSPECTION_NAMES):
            self.flag("introspection", node, f"{verb} {module} (reaches into the interpreter's state)")
        elif under(module, V.TIMING_NAMES):
            self.flag("patching", node, f"{verb} {module} (timers belong to the harness)")
        elif under(module, V.TENSOR_SUBCLASS_NAMES):
            self.flag("tensor_subclass", node, f"{verb} {module} (tensor subclass machinery)")
        elif under(module, V.GRAPH_NAMES) and not self.policy.allow_cuda_graphs:
            self.flag("cuda_graphs", node, f"{verb} {module} (CUDA graphs)")
        elif under(module, V.COMPILERS) and not self.compute_ok(module):
            self.flag("torch_compute", node, f"{verb} {module} (torch's compiler would generate the kernels)")
        elif module.rsplit(".", 1)[-1] in V.MODULE_HOOKS:
            self.flag("patching", node, f"{verb} {module} (a hook runs code around the forward)")
        if self.policy.denies(module):
            self.flag("denied_name", node, f"{verb} {module}, which the policy's deny list names")

    def class_def(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            path = self.names.resolve(base)
            if isinstance(base, ast.Name) and base.id == "Model":
                self.flag("reference_model", node, f"class {node.name} subclasses the reference Model")
            elif path and path in V.TENSOR_SUBCLASS_BASES:
                self.flag("tensor_subclass", node, f"class {node.name} subclasses {path}")

    def name_use(self, node: ast.Name) -> None:
        if node.id == "Model":
            self.flag("reference_model", node, "uses the reference Model")
        elif node.id == "__builtins__":
            self.flag("introspection", node, "uses __builtins__")
        elif node.id in V.INTROSPECTION_BUILTINS and node.id not in self.names.bound:
            self.flag("introspection", node, f"uses {node.id}() (runs or inspects code the checks cannot see)")

    def attribute_use(self, node: ast.Attribute) -> None:
        if node.attr in V.FRAME_ATTRS and not (isinstance(node.value, ast.Name) and node.value.id == "self"):
            self.flag("introspection", node, f"reads .{node.attr} (frames, globals or code objects)")
            return
        if node.attr in V.MODULE_HOOKS:
            self.flag("patching", node, f"uses .{node.attr} (a hook runs code around the forward)")
            return
        path = self.names.resolve(node)
        parent = getattr(node, "_parent", None)
        if path is None or (isinstance(parent, ast.Attribute) and parent.value is node):
            return  # judged as part of the longer name
        called = isinstance(parent, ast.Call) and parent.func is node
        if under(path, V.COMPARISON_NAMES) and not called:
            self.flag("patching", node, f"takes {path} as a value (comparisons belong to the harness)")
        elif path == "torch.cuda.synchronize" and not called:
            self.flag(
                "patching", node, "takes torch.cuda.synchronize as a value (synchronisation belongs to the harness)"
            )
        else:
            self.module_name(node, path, "uses")

    def assignment(self, target: ast.AST) -> None:
        """Patching: assignments into imported modules, their classes and objects; ``__class__`` swaps."""
        if isinstance(target, ast.Attribute) and target.attr == "__class__":
            self.flag("tensor_subclass", target, "assigns __class__ (turns an object into another type)")
            return
        if not isinstance(target, (ast.Attribute, ast.Subscript)):
            return
        path = self.names.resolve(target.value)
        if path == "os.environ" and isinstance(target, ast.Subscript) and _build_variable(target.slice):
            return
        if path is not None and path != EXTENSION_MODULE and not path.startswith(EXTENSION_MODULE + "."):
            if path == "os.environ":
                self.flag("patching", target, "sets an environment variable (threads and devices are the harness's)")
                return
            what = f"{path}.{target.attr}" if isinstance(target, ast.Attribute) else f"{path}[...]"
            self.flag("patching", target, f"assigns {what} (changes a module the harness also uses)")

    def call_anywhere(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in ("setattr", "delattr") and node.args:
            owner = self.names.resolve(node.args[0])
            if owner is not None:
                self.flag("patching", node, f"{func.id}() on {owner} (changes a module the harness also uses)")
        if isinstance(func, ast.Attribute) and func.attr in V.TENSOR_SUBCLASS_METHODS:
            self.flag("tensor_subclass", node, f"calls .{func.attr}() (makes a tensor subclass)")
        if isinstance(func, ast.Attribute) and func.attr in V.STREAM_METHODS and not self.policy.allow_python_streams:
            self.flag("streams", node, f"calls .{func.attr}() (no CUDA streams in model_new.py under this policy)")
        imported = self.names.resolve(node)
        if imported is not None:  # __import__("threading"), importlib.import_module("model")
            self.module_name(node, imported, "imports")
        path = self.names.resolve(func)
        if path is None:
            return
        build_setting = path == "os.environ.setdefault" and bool(node.args) and _build_variable(node.args[0])
        if path.startswith(V.GLOBAL_SETTING_PREFIXES) and path not in V.TORCH_CREATION and not build_setting:
            self.flag("patching", node, f"calls {path} (changes process-wide settings the baselines do not get)")
        elif under(path, V.STREAM_NAMES) and not self.policy.allow_python_streams:
            self.flag("streams", node, f"calls {path} (no CUDA streams in model_new.py under this policy)")
        elif path == "contextlib.suppress" and not self.policy.allow_exception_handling:
            self.flag("exception_fallback", node, "contextlib.suppress (a fallback would hide a failing kernel)")
        elif under(path, LOADERS):
            self.loader_call(node, path.rsplit(".", 1)[1])

    def loader_call(self, node: ast.Call, loader: str) -> None:
        """``load_inline``/``load``: compiled paths and build flags must stay inside the workspace."""
        arguments = {k.arg: k.value for k in node.keywords if k.arg}
        if loader == "load" and len(node.args) > 1:
            arguments.setdefault("sources", node.args[1])
        for constant in self._string_nodes(arguments.get("sources")):
            if escapes(PurePosixPath("."), constant.value):
                self.flag("outside_workspace", constant, f'{loader} compiles "{constant.value}"')
        for argument in FLAG_ARGS:
            previous = ""
            for constant in self._string_nodes(arguments.get(argument)):
                flag = constant.value.strip()
                if previous == "-D":
                    flag = "-D" + flag
                previous = flag
                self.build_flag(constant, argument, flag)

    def build_flag(self, node: ast.AST, argument: str, flag: str) -> None:
        if not flag or flag == "-D":
            return
        if flag.startswith("-D"):  # a macro the sources see: checked (and expanded) with them
            name, _, value = flag[2:].partition("=")
            define = f"#define {name} {value if '=' in flag else '1'}\n"
            self.cpp_sources.append(CppSource(self.path, define, getattr(node, "lineno", 1) - 1))
            return
        if argument in ("extra_include_paths", "build_directory") or flag.startswith(("-I", "-isystem", "-iquote")):
            target = re.sub(r"^(-I|-isystem|-iquote)", "", flag).strip()
            if target and escapes(PurePosixPath("."), target):
                self.flag("outside_workspace", node, f"{argument} points at {target!r}, outside the workspace")
        elif _UNSAFE_FLAG_RE.match(flag) or (not flag.startswith("-") and escapes(PurePosixPath("."), flag)):
            self.flag("outside_workspace", node, f"{argument} passes {flag!r} (links or loads from elsewhere)")
        elif flag.startswith("-l"):
            library = flag[2:]
            field = V.LIBRARY_LINK_FLAGS.get(library)
            allowed = field == "" or bool(field and getattr(self.policy, field)) or self.policy.allows(library)
            if not allowed:
                self.flag("vendor_libraries", node, f"{argument} links {library} (not allowed here)")

    def _string_nodes(self, node: ast.AST | None, depth: int = 0) -> Iterator[ast.Constant]:
        """The string constants an argument is built from: literals, lists, ``+``, f-strings, module names."""
        if node is None or depth > 8:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield node
        elif isinstance(node, (ast.List, ast.Tuple)):
            for element in node.elts:
                yield from self._string_nodes(element, depth + 1)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            yield from self._string_nodes(node.left, depth + 1)
            yield from self._string_nodes(node.right, depth + 1)
        elif isinstance(node, ast.JoinedStr):
            for value in node.values:
                yield from self._string_nodes(value, depth + 1)
        elif isinstance(node, ast.Name):
            for value in self.names.values.get(node.id, ()):
                yield from self._string_nodes(value, depth + 1)

    def _cpp_source_strings(self, tree: ast.Module) -> set[int]:
        """Ids of the string constants passed to ``load_inline`` as C++/CUDA sources."""
        found: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and under(self.names.resolve(node.func) or "", LOADERS):
                arguments = {k.arg: k.value for k in node.keywords if k.arg}
                for keyword, position in CPP_SOURCE_ARGS.items():
                    value = arguments.get(keyword, node.args[position] if len(node.args) > position else None)
                    found.update(id(c) for c in self._string_nodes(value))
        return found

    def constant(self, node: ast.Constant, docstring: bool) -> None:
        value = node.value
        if isinstance(value, bytes) and (len(value) >= 64 or value.startswith(b"\x7fELF")):
            self.flag("binary_loading", node, f"a bytes literal of {len(value)} bytes (an embedded binary)")
        if not isinstance(value, str):
            return
        unprintable = sum(not (ch.isprintable() or ch in "\n\t\r") for ch in value)
        if value.startswith("\x7fELF") or unprintable >= 32 or _BLOB_RE.search(value):
            self.flag("binary_loading", node, "a string holds an embedded binary blob")
        elif docstring:
            return
        elif _BINARY_PATH_RE.search(value) and " " not in value and len(value) < 4096:
            self.flag("binary_loading", node, f'the path "{value[:80]}" names a prebuilt binary or data file')
        elif value.startswith(("/proc/", "/dev/shm")):
            self.flag("introspection", node, f'the path "{value[:80]}" reads process or shared-memory state')
        elif id(node) in self.cpp_strings or _CPP_HINT_RE.search(value):
            self.cpp_sources.append(CppSource(self.path, value, node.lineno - 1))

    # -- the forward path --------------------------------------------------------------------------

    def compute_ok(self, *names: str) -> bool:
        return self.policy.allow_torch_compute or self.policy.allows(*names)

    def forward_path(self, function: ast.AST) -> None:
        tensors, modules = self.flow.local_names(function)
        for node in walk_own(function):
            for key, what in self.flow.compute(node, tensors, modules):
                if not self.compute_ok(key) and self.policy.enabled("torch_compute"):
                    self.flag("torch_compute", node, what)
            if self.policy.deny and isinstance(node, ast.Call):
                path = self.names.resolve(node.func)
                method = f"Tensor.{node.func.attr}" if isinstance(node.func, ast.Attribute) else ""
                if self.policy.denies(*(n for n in (path, method) if n)):
                    self.flag("denied_name", node, f"calls {path or method}, which the policy's deny list names")

    def values_at_definition(self, tree: ast.Module) -> None:
        """What default arguments, decorators and class bodies hold is evaluated when the module loads and
        called later: torch functions and modules there (``def forward(self, x, t=torch)``, ``act =
        torch.relu`` in a class body, ``@torch.autocast(...)``) are judged as on the forward path."""
        judged: list[tuple[ast.AST, bool]] = []
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                judged += [(d, False) for d in (*node.args.defaults, *node.args.kw_defaults) if d is not None]
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                judged += [(d, True) for d in node.decorator_list]
            if isinstance(node, ast.ClassDef):
                kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
                judged += [(statement, False) for statement in node.body if not isinstance(statement, kinds)]
        if not self.policy.enabled("torch_compute"):
            return
        for root, calls in judged:
            for sub in _walk_values(root):
                found = self.flow.compute(sub, set(), set()) if calls or not isinstance(sub, ast.Call) else ()
                for key, what in found:
                    if not self.compute_ok(key):
                        self.flag("torch_compute", sub, what)

    def extension_called(self, tree: ast.Module, forward_path: list[ast.AST]) -> None:
        """A ``forward`` that returns a value must reach the extension somewhere on the forward path."""
        forwards = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "forward"]
        returning = [f for f in forwards if any(isinstance(n, ast.Return) and n.value for n in walk_own(f))]
        if returning and not any(self.flow.is_extension_call(n) for f in forward_path for n in walk_own(f)):
            self.flag("extension_called", returning[0], "forward returns without calling your extension's kernels")


def _walk_values(root: ast.AST) -> Iterator[ast.AST]:
    """The nodes of an expression or statement, without the bodies of the lambdas in it (judged as functions)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _build_variable(node: ast.AST) -> bool:
    """Whether ``node`` names an environment variable that only steers the extension's build."""
    return isinstance(node, ast.Constant) and node.value in V.BUILD_ENVIRONMENT


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                found.add(id(value))
    return found


def check_python(source: str, path: str, policy: IntegrityPolicy, known_files: Iterable[str] = ()) -> list[Violation]:
    """Violations of the Python source ``source`` (workspace path ``path``) under ``policy``, with those of
    the C++ sources it holds (checked on their own; :func:`cudagym.integrity.check_files` checks them with
    the workspace's kernels)."""
    checker = PythonChecker(source, path, policy, known_files)
    found = checker.run()
    return found + check_cpp_sources(checker.cpp_sources, policy, known_files=known_files)
