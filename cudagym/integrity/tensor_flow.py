"""Which values in model_new.py hold tensors, and which expressions on the forward path compute with torch.

A light, flow-insensitive analysis: the forward's arguments, the extension's results, parameters and
buffers set in ``__init__``, torch allocations, and whatever is assigned from them hold tensors; helper
functions and methods called with a tensor take tensors in those positions (also through ``self.fn =
self.helper``), and the functions a decorator defines take the decorated forward's tensors. An expression
computes with torch when it calls a torch (or other library) function outside the allowed creation/view
set, calls a compute method of a tensor, calls an ``nn`` module (held by ``self``, a class attribute or a
module-level name), applies an operator, a comparison or tensor indexing to a tensor (also spelled
``x.__add__(y)`` or ``operator.add(x, y)``), or takes a torch function or module as a value to call later
(``t=torch`` as a default, ``act = torch.relu`` in a class body).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from typing import Protocol

from cudagym.integrity import vocabulary as V

_TENSOR_FACTORIES = frozenset(
    f"torch.{n}"
    for n in "empty empty_like empty_strided zeros zeros_like ones ones_like full full_like tensor "
    "as_tensor arange".split()
)
_OPERATORS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
              ast.Pow: "**", ast.LShift: "<<", ast.RShift: ">>", ast.BitOr: "|", ast.BitXor: "^", ast.BitAnd: "&",
              ast.USub: "unary -", ast.UAdd: "unary +", ast.Invert: "~"}  # fmt: skip
_COMPARISONS = (ast.Lt, ast.LtE, ast.Gt, ast.GtE, ast.Eq, ast.NotEq)
_NON_COMPUTE_TORCH = (V.TIMING_NAMES | V.STREAM_NAMES | V.GRAPH_NAMES | V.CONCURRENCY_NAMES | V.LOADER_NAMES
                      | V.TENSOR_SUBCLASS_NAMES | V.CONCURRENCY_MODULES | frozenset(V.COMPILERS))  # fmt: skip
_VALUE_MODULES = ("torch.nn.functional", "torch.special", "torch.linalg", "torch.fft", "torch.ops", "torch._C._nn")


class Resolver(Protocol):
    """What the analysis needs from the file's name table."""

    def resolve(self, node: ast.AST) -> str | None: ...


def _under(path: str, names: frozenset[str] | tuple[str, ...]) -> bool:
    return any(path == n or path.startswith(n + ".") for n in names)


def _self_attr(node: ast.AST) -> str | None:
    """``X`` for ``self.X``."""
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
        return node.attr
    return None


def _targets(node: ast.AST) -> Iterator[ast.AST]:
    """The names an assignment-like node binds, with the value it binds them from."""
    if isinstance(node, ast.Assign):
        for target in node.targets:
            yield from _flatten(target)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.For, ast.comprehension, ast.NamedExpr)):
        yield from _flatten(node.target)
    elif isinstance(node, ast.withitem) and node.optional_vars is not None:
        yield from _flatten(node.optional_vars)


def _flatten(target: ast.AST) -> Iterator[ast.AST]:
    if isinstance(target, (ast.Tuple, ast.List)):
        for element in target.elts:
            yield from _flatten(element)
    elif isinstance(target, ast.Starred):
        yield from _flatten(target.value)
    else:
        yield target


def _source(node: ast.AST) -> ast.AST | None:
    if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
        return node.value
    if isinstance(node, (ast.For, ast.comprehension)):
        return node.iter
    if isinstance(node, ast.withitem):
        return node.context_expr
    return None


def is_torch_compute_path(path: str) -> bool:
    """Whether calling ``path`` makes torch or another library compute (allowed creation/views excluded;
    names other rules judge, such as timers or streams, excluded too)."""
    if path.split(".")[0] in V.COMPUTE_MODULES or _under(path, V.COMPUTE_MODULES):
        return True
    if not path.startswith("torch.") or path in V.TORCH_CREATION or path in V.TORCH_VIEWS:
        return False
    return not (_under(path, _NON_COMPUTE_TORCH) or path.startswith(V.GLOBAL_SETTING_PREFIXES))


class TensorFlow:
    """The analysis for one module (see the module docstring)."""

    def __init__(self, tree: ast.Module, names: Resolver, functions: list[ast.AST]) -> None:
        self.names = names
        self.self_modules: set[str] = set()  # self.X holding an nn module or a torch function
        self.self_tensors: set[str] = set()  # self.X holding a tensor or parameter
        self.self_extensions: set[str] = set()  # self.X holding the compiled extension
        self.self_functions: dict[str, str] = {}  # self.X holding a function or method of the module (its name)
        self.global_modules: set[str] = set()  # module-level names holding an nn module
        self.params: dict[ast.AST, set[str]] = {}  # function -> parameters that receive tensors
        self._by_name: dict[str, list[ast.AST]] = {}
        for function in functions:
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._by_name.setdefault(function.name, []).append(function)
        self._collect_attributes(tree)
        for function in functions:
            if isinstance(function, ast.FunctionDef) and function.name == "forward":
                self.params[function] = _parameters(function, skip_first=True)
        self._decorated(tree)
        self._propagate(functions)

    # -- attributes set on self ----------------------------------------------------------------------

    def _collect_attributes(self, tree: ast.Module) -> None:
        """What ``self.X`` holds, from assignments to ``self.X`` anywhere and to ``X`` in a class body (a
        class attribute is reached as ``self.X`` too); which module-level names hold an nn module."""
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                if node.func.attr == "register_buffer" and isinstance(node.args[0], ast.Constant):
                    self.self_tensors.add(str(node.args[0].value))
                continue
            if isinstance(node, ast.ClassDef):
                for statement in node.body:
                    if isinstance(statement, (ast.Assign, ast.AnnAssign)) and statement.value is not None:
                        for target in _targets(statement):
                            if isinstance(target, ast.Name):
                                self._classify_attribute(target.id, statement.value)
                continue
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            for target in _targets(node):
                name = _self_attr(target)
                if name is not None:
                    self._classify_attribute(name, node.value)
        for statement in tree.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Call):
                if _is_module_class(self.names.resolve(statement.value.func) or ""):
                    self.global_modules |= {t.id for t in statement.targets if isinstance(t, ast.Name)}

    def _classify_attribute(self, name: str, value: ast.AST) -> None:
        function = _self_attr(value) or (value.id if isinstance(value, ast.Name) else None)
        if function is not None and function in self._by_name:
            self.self_functions[name] = function  # self.fn = self.helper: calls of self.fn run helper
        if isinstance(value, ast.Call):
            path = self.names.resolve(value.func) or ""
            if _is_module_class(path):
                self.self_modules.add(name)
            elif path.startswith("torch."):
                self.self_tensors.add(name)
            elif path.startswith("cuda_extension"):
                self.self_tensors.add(name)
            return
        path = self.names.resolve(value)
        if path == "cuda_extension" or (path and path.startswith("cuda_extension.")):
            self.self_extensions.add(name)
        elif path and is_torch_compute_path(path):
            self.self_modules.add(name)

    def _decorated(self, tree: ast.Module) -> None:
        """A function the module defines and uses as a decorator (``@wrap``, ``@wrap(...)``) replaces what it
        decorates: the functions it defines take the forward's tensors, and its parameters (the wrapped
        function) return them."""
        module_level = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for node in ast.walk(tree):
            for decorator in getattr(node, "decorator_list", ()):
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if isinstance(target, ast.Name) and target.id in module_level:
                    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
                    inner = [f for f in ast.walk(module_level[target.id]) if isinstance(f, kinds)]
                    names = set().union(*(_parameters(f, skip_first=False) for f in inner)) - {"self", "cls"}
                    for function in inner:
                        self.params.setdefault(function, set()).update(names)

    # -- tensors flowing into functions ------------------------------------------------------------

    def _propagate(self, functions: list[ast.AST]) -> None:
        for _ in range(4):
            changed = False
            for function in functions:
                tensors, _modules = self.local_names(function)
                for node in _walk_own(function):
                    if isinstance(node, ast.Call):
                        changed |= self._tensor_arguments(node, tensors)
            if not changed:
                return

    def _tensor_arguments(self, call: ast.Call, tensors: set[str]) -> bool:
        callee = call.func.id if isinstance(call.func, ast.Name) else _self_attr(call.func)
        callee = self.self_functions.get(callee or "", callee)
        changed = False
        for function in self._by_name.get(callee or "", ()):
            params = _positional(function)
            offset = 1 if isinstance(call.func, ast.Attribute) and params and params[0].arg == "self" else 0
            for index, argument in enumerate(call.args):
                if index + offset < len(params) and self.is_tensor(argument, tensors):
                    name = params[index + offset].arg
                    if name not in self.params.setdefault(function, set()):
                        self.params[function].add(name)
                        changed = True
        return changed

    def local_names(self, function: ast.AST) -> tuple[set[str], set[str]]:
        """(names holding tensors, names holding nn modules) inside ``function``."""
        tensors = set(self.params.get(function, ()))
        modules: set[str] = set()
        binders = [n for n in _walk_own(function) if _source(n) is not None]
        for _ in range(8):
            before = len(tensors) + len(modules)
            for node in binders:
                value = _source(node)
                holds_module = self._is_module(value, modules)
                holds_tensor = self.is_tensor(value, tensors)
                for target in _targets(node):
                    if isinstance(target, ast.Name):
                        if holds_module:
                            modules.add(target.id)
                        elif holds_tensor:
                            tensors.add(target.id)
            if len(tensors) + len(modules) == before:
                break
        return tensors, modules

    def _is_module(self, node: ast.AST | None, modules: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in modules or node.id in self.global_modules
        if isinstance(node, ast.Subscript):
            return self._is_module(node.value, modules)
        return _self_attr(node) in self.self_modules if node is not None else False

    # -- judgements --------------------------------------------------------------------------------

    def is_extension_call(self, node: ast.AST) -> bool:
        """Whether ``node`` calls into the compiled extension."""
        if not isinstance(node, ast.Call):
            return False
        path = self.names.resolve(node.func) or ""
        if path.startswith("cuda_extension."):
            return True
        return isinstance(node.func, ast.Attribute) and _self_attr(node.func.value) in self.self_extensions

    def is_tensor(self, node: ast.AST | None, tensors: set[str]) -> bool:
        """Whether ``node`` (probably) evaluates to a tensor."""
        if isinstance(node, ast.Name):
            return node.id in tensors
        if isinstance(node, ast.Attribute):
            owner = _self_attr(node.value)
            if _self_attr(node) in self.self_tensors:
                return True
            if owner in self.self_modules and node.attr.startswith(V.PARAMETER_ATTR_HINTS):
                return True
            return node.attr not in V.TENSOR_METADATA_ATTRS and self.is_tensor(node.value, tensors)
        if isinstance(node, ast.Call):
            if self.is_extension_call(node) or self._is_module(node.func, set()):
                return True
            if isinstance(node.func, ast.Name) and node.func.id in tensors:
                return True  # the function a decorator wraps returns the forward's result
            path = self.names.resolve(node.func)
            if path is not None:
                return path in _TENSOR_FACTORIES or path in V.TORCH_VIEWS or is_torch_compute_path(path)
            if isinstance(node.func, ast.Attribute):
                method = node.func.attr
                return method not in V.TENSOR_METADATA_METHODS and self.is_tensor(node.func.value, tensors)
            return False
        if isinstance(node, (ast.Subscript, ast.Starred)):
            return self.is_tensor(node.value, tensors)
        if isinstance(node, ast.BinOp):
            return self.is_tensor(node.left, tensors) or self.is_tensor(node.right, tensors)
        if isinstance(node, ast.UnaryOp):
            return self.is_tensor(node.operand, tensors)
        if isinstance(node, ast.IfExp):
            return self.is_tensor(node.body, tensors) or self.is_tensor(node.orelse, tensors)
        if isinstance(node, (ast.Tuple, ast.List)):
            return any(self.is_tensor(e, tensors) for e in node.elts)
        if isinstance(node, ast.NamedExpr):
            return self.is_tensor(node.value, tensors)
        return False

    def compute(self, node: ast.AST, tensors: set[str], modules: set[str]) -> Iterator[tuple[str, str]]:
        """(name for the allow list, what) for each way ``node`` makes torch compute."""
        if isinstance(node, ast.Call):
            yield from self._call(node, tensors, modules)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            yield "@", "uses the @ operator (a torch matmul)"
        elif isinstance(node, ast.BinOp) and (
            self.is_tensor(node.left, tensors) or self.is_tensor(node.right, tensors)
        ):
            yield _OPERATORS[type(node.op)], f"applies {_OPERATORS[type(node.op)]} to a tensor (torch computes it)"
        elif isinstance(node, ast.AugAssign) and (
            self.is_tensor(node.target, tensors)
            or self.is_tensor(node.value, tensors)
            or isinstance(node.op, ast.MatMult)
        ):
            op = _OPERATORS.get(type(node.op), "@")
            yield op, f"applies {op}= to a tensor (torch computes it)"
        elif isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS and self.is_tensor(node.operand, tensors):
            yield _OPERATORS[type(node.op)], f"applies {_OPERATORS[type(node.op)]} to a tensor (torch computes it)"
        elif isinstance(node, ast.Compare) and any(isinstance(op, _COMPARISONS) for op in node.ops):
            if any(self.is_tensor(v, tensors) for v in (node.left, *node.comparators)):
                yield "compare", "compares a tensor elementwise (torch computes it)"
        elif isinstance(node, ast.Subscript):
            if self.is_tensor(node.value, tensors) and any(self.is_tensor(s, tensors) for s in _slices(node.slice)):
                yield "index", "indexes a tensor with a tensor (torch gathers it)"
            elif isinstance(node.ctx, ast.Store) and self.is_tensor(node.value, tensors):
                yield "index", "writes into a tensor through indexing (torch copies it)"
        elif isinstance(node, (ast.Attribute, ast.Name)) and isinstance(getattr(node, "ctx", None), ast.Load):
            yield from self.value(node, tensors)

    def value(self, node: ast.Attribute | ast.Name, tensors: set[str]) -> Iterator[tuple[str, str]]:
        """Rules on a name or attribute that is read: an operator's method spelled out, the ``operator``
        module, and torch functions or modules taken as values (to be called later)."""
        parent = getattr(node, "_parent", None)
        is_callee = isinstance(parent, ast.Call) and parent.func is node
        is_prefix = isinstance(parent, ast.Attribute) and parent.value is node
        if isinstance(node, ast.Attribute) and node.attr in V.DUNDER_OPERATORS:
            yield f"Tensor.{node.attr}", f"uses .{node.attr} (an operator's method: torch computes it on tensors)"
            return
        path = self.names.resolve(node)
        if not path or is_prefix:
            return
        if path.split(".")[0] in V.OPERATOR_MODULES:
            yield from self._operator(node, path, parent, is_callee, tensors)
        elif is_callee:
            return
        elif _computes_as_value(path):
            yield path, f"takes {path} as a value (a torch function that computes)"
        elif path in V.MODULE_VALUES and not _exempt_value(node, path):
            yield path, f"takes {path} as a value (its functions compute with torch)"

    def _operator(
        self, node: ast.AST, path: str, parent: ast.AST | None, is_callee: bool, tensors: set[str]
    ) -> Iterator[tuple[str, str]]:
        """``operator.add(x, y)`` on tensors, ``functools.reduce(operator.mul, tensors)``, ``f =
        operator.add``, ``operator.methodcaller("relu")``: operators and methods reached through ``operator``."""
        name = path.split(".", 1)[1] if "." in path else ""
        if name in V.OPERATOR_BY_NAME:
            yield path, f"uses {path} (reaches methods by a name given as data)"
        elif name in V.OPERATOR_COMPUTE and isinstance(parent, ast.Call):
            arguments = [*parent.args, *(k.value for k in parent.keywords)]
            if any(self.is_tensor(a, tensors) for a in arguments if a is not node):
                yield path, f"applies {path} to a tensor (torch computes it)"
        elif name in V.OPERATOR_COMPUTE or (not name and not is_callee):
            yield path, f"takes {path} as a value (an operator to apply later)"

    def _call(self, node: ast.Call, tensors: set[str], modules: set[str]) -> Iterator[tuple[str, str]]:
        func = node.func
        path = self.names.resolve(func)
        if path is not None:
            if is_torch_compute_path(path):
                library = "torch" if path.startswith("torch.") else path.split(".")[0]
                yield path, f"calls {path} ({library} computes it, not your kernel)"
            return
        if isinstance(func, ast.Name) and func.id in V.BUILTINS_ON_TENSORS:
            if any(self.is_tensor(a, tensors) for a in node.args):
                yield func.id, f"calls {func.id}() on a tensor (torch computes it)"
            return
        if isinstance(func, ast.Name) and func.id == "getattr" and len(node.args) >= 2:
            parent = getattr(node, "_parent", None)
            called = isinstance(parent, ast.Call) and parent.func is node
            yield from self._getattr(node.args[0], node.args[1], tensors, called=called)
            return
        if self._is_module(func, modules) or (
            isinstance(func, ast.Attribute)
            and func.attr in ("forward", "__call__")
            and self._is_module(func.value, modules)
        ):
            shown = ast.unparse(func)
            yield shown, f"calls {shown} (an nn module or torch function computes it, not your kernel)"
            return
        if isinstance(func, ast.Attribute) and not self._is_inert_receiver(func.value):
            method = func.attr
            in_place = method.endswith("_") and not method.startswith("_") and method not in V.TENSOR_VIEW_METHODS
            if method in V.TENSOR_COMPUTE_METHODS or in_place:
                if method not in V.AMBIGUOUS_METHODS or self.is_tensor(func.value, tensors):
                    yield (
                        f"Tensor.{method}",
                        f"calls the tensor method .{method}() (torch computes it, not your kernel)",
                    )

    def _getattr(
        self, owner: ast.AST, attribute: ast.AST, tensors: set[str], *, called: bool
    ) -> Iterator[tuple[str, str]]:
        """``getattr(torch, "relu")``, ``getattr(operator, name)``, ``getattr(x, "exp")``: judged as the
        attribute it reaches (called, or as a value); a computed name on a tensor or on a module that
        computes (torch, ``operator``, numpy, ...) could reach anything."""
        owner_path = self.names.resolve(owner) or ""
        name = attribute.value if isinstance(attribute, ast.Constant) and isinstance(attribute.value, str) else None
        top = owner_path.split(".")[0]
        if top == "torch" or top in V.OPERATOR_MODULES or top in V.COMPUTE_MODULES:
            full = f"{owner_path}.{name}"
            operator = top in V.OPERATOR_MODULES and name in V.OPERATOR_COMPUTE | V.OPERATOR_BY_NAME
            computes = is_torch_compute_path(full) if called else _computes_as_value(full) or full in V.MODULE_VALUES
            if name is None or computes or operator:
                yield "getattr", f"reaches {owner_path}.{name or '<computed name>'} through getattr"
        elif self.is_tensor(owner, tensors):
            if name is None or name in V.TENSOR_COMPUTE_METHODS or name in V.DUNDER_OPERATORS:
                yield "getattr", "reaches a tensor method through getattr (torch computes it)"

    def _is_inert_receiver(self, node: ast.AST) -> bool:
        """``self``, ``super()``, strings, the extension and imported modules: receivers of non-tensor methods."""
        if isinstance(node, ast.Name) and node.id in ("self", "cls"):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
            return True
        if isinstance(node, (ast.Constant, ast.JoinedStr, ast.Dict, ast.Set)):
            return True
        return _self_attr(node) in self.self_extensions or self.names.resolve(node) is not None


def _computes_as_value(path: str) -> bool:
    if _under(path, _VALUE_MODULES):
        return True
    if path.startswith(("torch.Tensor.", "torch._C.TensorBase.", "torch._C._TensorBase.")):
        method = path.rsplit(".", 1)[1]
        in_place = method.endswith("_") and not method.startswith("_") and method not in V.TENSOR_VIEW_METHODS
        return method in V.TENSOR_COMPUTE_METHODS or method in V.DUNDER_OPERATORS or in_place
    if not path.startswith("torch.") or path in V.TORCH_CREATION or path in V.TORCH_VIEWS:
        return False
    last = path.rsplit(".", 1)[1]
    module_class = path.startswith("torch.nn.") and last[:1].isupper() and path not in V.NN_PARAMETER_HOLDERS
    compute = last in V.TENSOR_COMPUTE_METHODS | V.ATEN_BARE_COMPUTE and last not in V.DTYPE_NAMES
    return module_class or (path.count(".") == 1 and compute)


def _exempt_value(node: ast.AST, path: str) -> bool:
    """Places where a module or ``torch.Tensor`` as a value computes nothing: ``getattr``/``hasattr``'s
    object (judged by the getattr rule), ``isinstance``/``issubclass``/``type(x) is torch.Tensor``, and
    annotations."""
    parent = getattr(node, "_parent", None)
    while isinstance(parent, (ast.Tuple, ast.List)):
        node, parent = parent, getattr(parent, "_parent", None)
    if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name):
        if parent.func.id in ("getattr", "hasattr") and parent.args[:1] == [node]:
            return True
        if parent.func.id in ("isinstance", "issubclass"):
            return path == "torch.Tensor"
    if isinstance(parent, ast.Compare) and path == "torch.Tensor":
        return all(isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) for op in parent.ops)
    child = node
    while parent is not None and not isinstance(parent, ast.stmt):
        child, parent = parent, getattr(parent, "_parent", None)
    return isinstance(parent, ast.AnnAssign) and parent.annotation is child


def _is_module_class(path: str) -> bool:
    """Whether calling ``path`` builds a ``torch.nn`` module (``nn.ReLU()``), not a parameter holder."""
    last = path.rsplit(".", 1)[-1]
    return path.startswith("torch.nn.") and last[:1].isupper() and path not in V.NN_PARAMETER_HOLDERS


def _parameters(function: ast.AST, *, skip_first: bool) -> set[str]:
    """A function's parameter names (without ``self`` when ``skip_first``)."""
    args = function.args
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    rest = [a.arg for a in (args.vararg, args.kwarg) if a] + [a.arg for a in args.kwonlyargs]
    return set(positional[1:] if skip_first else positional) | set(rest)


def _slices(node: ast.AST) -> list[ast.AST]:
    return list(node.elts) if isinstance(node, ast.Tuple) else [node]


def _positional(function: ast.AST) -> list[ast.arg]:
    args = function.args
    return [*args.posonlyargs, *args.args]


def _walk_own(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's own body (nested functions and classes are walked on their own)."""
    body = function.body if isinstance(function.body, list) else [function.body]
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(reversed(node.decorator_list))
        elif not isinstance(node, ast.Lambda):
            stack.extend(reversed(list(ast.iter_child_nodes(node))))


walk_own = _walk_own
