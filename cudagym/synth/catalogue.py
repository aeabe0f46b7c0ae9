"""The operator catalogue: the seed operators the composer draws from, found by introspecting what is installed.

Sources: the ``torch.nn`` module classes, the ``torch.nn.functional`` functions, torch's tensor functions (the names
of ``torch._refs``, its pointwise ops and reductions written in Python, looked up on ``torch``) and, when
``transformers`` is installed, the building blocks of the modules in ``hints.TRANSFORMERS_MODULES`` that need no
weights download (activations, norms, rotary helpers). Each candidate is probed (``probe.py``); the usable ones
become :class:`OpSpec` records and the others are listed with the reason they were skipped. The catalogue is data:
:func:`build_catalogue` makes it, :meth:`Catalogue.save` writes it as JSON and :func:`load_catalogue` reads it back;
its ``version`` names the schema, the torch and transformers versions and a hash of the ops.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import logging
import warnings
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path
from typing import Any

import torch

from cudagym.synth import hints
from cudagym.synth.probe import ProbeResult, probe_function, probe_module

logger = logging.getLogger(__name__)

SCHEMA = 1
"""The catalogue file's schema: bump it when :class:`OpSpec` changes."""


@dataclasses.dataclass(frozen=True)
class OpSpec:
    """One seed operator.

    Attributes:
        name: the qualified name (``torch.nn.Linear``, ``torch.tanh``, ``transformers.activations.GELUActivation``).
        module: the module it is imported from; ``attr``: its name there.
        kind: ``"module"`` (an ``nn.Module`` class, built in ``__init__``) or ``"function"`` (called in ``forward``).
        family: ``"torch"`` or ``"transformers"``.
        signature: the constructor's or the function's signature as text ('' where Python cannot read it).
        arity: tensor inputs per call (1, or 2 for a binary op).
        kwargs: keyword arguments of each call (a function's ``dim``/``keepdim``).
        constructor: constructor arguments as ``hints`` rules (``dim:-1``, ``dim:1``, ``new``) or literal values.
        shape_rules: input rank -> what the op does to each dimension (``probe.DIM_RULES``).
        dtypes: the floating dtypes it runs in.
        deterministic: the same output for the same input, whatever the global seed.
        has_weights: the module has parameters (its ``forward`` costs a matmul or a convolution, not a pass).
    """

    name: str
    module: str
    attr: str
    kind: str
    family: str
    signature: str
    arity: int
    kwargs: Mapping[str, Any]
    constructor: Mapping[str, Any]
    shape_rules: Mapping[int, tuple[str, ...]]
    dtypes: tuple[str, ...]
    deterministic: bool
    has_weights: bool = False

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted(self.shape_rules))

    @property
    def short(self) -> str:
        """The last part of the name (what a task's name and the op-sequence comparison use)."""
        return self.attr

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["shape_rules"] = {str(rank): list(rule) for rank, rule in self.shape_rules.items()}
        data["dtypes"] = list(self.dtypes)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpSpec:
        fields = dict(data)
        fields["shape_rules"] = {int(rank): tuple(rule) for rank, rule in data["shape_rules"].items()}
        fields["dtypes"] = tuple(data["dtypes"])
        return cls(**fields)


@dataclasses.dataclass(frozen=True)
class Catalogue:
    """The usable operators and, for every candidate that was not usable, why (name -> reason)."""

    version: str
    torch_version: str
    transformers_version: str | None
    ops: tuple[OpSpec, ...]
    skipped: Mapping[str, str]

    def by_name(self, name: str) -> OpSpec:
        for op in self.ops:
            if op.name == name:
                return op
        raise KeyError(f"no operator {name!r} in catalogue {self.version}")

    def composable(self) -> tuple[OpSpec, ...]:
        """The deterministic ops, the ones a task may contain."""
        return tuple(op for op in self.ops if op.deterministic)

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        data = {
            "schema": SCHEMA,
            "version": self.version,
            "torch": self.torch_version,
            "transformers": self.transformers_version,
            "ops": [op.to_dict() for op in self.ops],
            "skipped": dict(sorted(self.skipped.items())),
        }
        path.write_text(json.dumps(data, indent=1, sort_keys=True))
        return path


def load_catalogue(path: str | Path) -> Catalogue:
    """Reads a catalogue :meth:`Catalogue.save` wrote; ValueError for another schema."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: catalogue schema {data.get('schema')!r}, this cudagym reads schema {SCHEMA}")
    return Catalogue(
        version=data["version"],
        torch_version=data["torch"],
        transformers_version=data["transformers"],
        ops=tuple(OpSpec.from_dict(op) for op in data["ops"]),
        skipped=dict(data["skipped"]),
    )


def _constructor_rules(cls: type) -> tuple[dict[str, Any], str] | str:
    """A module class's constructor rules and signature, or why it cannot be built from an input's shape."""
    try:
        signature = inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return "constructor signature unreadable"
    rules: dict[str, Any] = {}
    for name, param in list(signature.parameters.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name in hints.PARAM_RULES and param.default is param.empty:
            rules[name] = hints.PARAM_RULES[name]
        elif name in hints.NONE_DEFAULTS and param.default is None:
            rules[name] = hints.NONE_DEFAULTS[name]
        elif param.default is param.empty:
            return f"required constructor argument {name!r} has no hint"
    for part, literal in hints.CLASS_OVERRIDES.items():
        if part in cls.__name__:
            rules.update({k: v for k, v in literal.items() if k in signature.parameters})
    return rules, str(signature).replace("(self, ", "(", 1)


def _module_classes(module: Any) -> Iterator[tuple[str, type]]:
    for attr in sorted(dir(module)):
        value = getattr(module, attr, None)
        if (
            inspect.isclass(value)
            and issubclass(value, torch.nn.Module)
            and not attr.startswith("_")
            and not inspect.isabstract(value)
            and value.__module__.split(".")[0] in ("torch", "transformers")
        ):
            yield attr, value


def _candidates(family: str, module_name: str) -> Iterator[tuple[str, str, Any]]:
    """(attr, kind, object) of one module's candidates."""
    module = importlib.import_module(module_name)
    if module_name == "torch":
        import torch._refs

        for attr in sorted(set(torch._refs.__all__)):
            if hasattr(torch, attr) and callable(getattr(torch, attr)):
                yield attr, "function", getattr(torch, attr)
        return
    if family == "torch" and module_name == "torch.nn":
        for attr, cls in _module_classes(module):
            yield attr, "module", cls
        return
    if module_name == "torch.nn.functional":
        for attr in sorted(dir(module)):
            value = getattr(module, attr)
            if inspect.isfunction(value) or inspect.isbuiltin(value):
                yield attr, "function", value
        return
    for attr, cls in _module_classes(module):
        if cls.__module__ == module_name or module_name == "transformers.activations":
            yield attr, "module", cls
    for attr in sorted(dir(module)):
        value = getattr(module, attr)
        if inspect.isfunction(value) and value.__module__ == module_name and not attr.startswith("_"):
            yield attr, "function", value


SOURCES = (("torch", "torch.nn"), ("torch", "torch.nn.functional"), ("torch", "torch"))


def _transformers_version() -> str | None:
    try:
        import transformers
    except ImportError:
        return None
    return str(transformers.__version__)


def _probe_one(attr: str, kind: str, value: Any) -> tuple[ProbeResult, dict[str, Any], str] | str:
    if any(attr.startswith(prefix) for prefix in hints.EXCLUDED_PREFIXES) or attr.endswith("_"):
        return "configures, queries or works in place"
    if kind == "module":
        found = _constructor_rules(value)
        if isinstance(found, str):
            return found
        rules, signature = found
        return probe_module(value, rules), rules, signature
    try:
        signature = str(inspect.signature(value))
    except (TypeError, ValueError):
        signature = ""
    return probe_function(value), {}, signature


def build_catalogue(include_transformers: bool = True, only: Collection[str] | None = None) -> Catalogue:
    """Introspects and probes the installed torch (and transformers, when installed and asked for); ``only``: probe
    just the candidates of these qualified names (a small catalogue, for tests and experiments)."""
    tf_version = _transformers_version() if include_transformers else None
    sources = list(SOURCES)
    if tf_version is not None:
        sources += [("transformers", name) for name in hints.TRANSFORMERS_MODULES]
    ops: dict[str, OpSpec] = {}
    skipped: dict[str, str] = {}
    torch_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for family, module_name in sources:
            try:
                candidates = list(_candidates(family, module_name))
            except ImportError as exc:
                skipped[module_name] = f"not importable: {exc}"
                continue
            for attr, kind, value in candidates:
                name = f"{module_name}.{attr}"
                if name in hints.EXCLUDED_NAMES or name in ops or (only is not None and name not in only):
                    continue
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    found = _probe_one(attr, kind, value)
                if isinstance(found, str) or not found[0].usable:
                    skipped[name] = found if isinstance(found, str) else found[0].error
                    continue
                result, rules, signature = found
                ops[name] = OpSpec(
                    name=name,
                    module=module_name,
                    attr=attr,
                    kind=kind,
                    family=family,
                    signature=signature,
                    arity=result.arity,
                    kwargs=dict(result.kwargs),
                    constructor=rules,
                    shape_rules=dict(result.shape_rules),
                    dtypes=result.dtypes,
                    deterministic=result.deterministic,
                    has_weights=kind == "module" and bool(_build_for_weights(value, rules)),
                )
    finally:
        torch.set_num_threads(torch_threads)
    digest = hashlib.sha256(json.dumps([op.to_dict() for op in ops.values()], sort_keys=True).encode()).hexdigest()
    version = f"{SCHEMA}-torch{torch.__version__}-transformers{tf_version or 'none'}-{digest[:10]}"
    logger.info("catalogue %s: %d ops, %d skipped", version, len(ops), len(skipped))
    return Catalogue(version, str(torch.__version__), tf_version, tuple(ops.values()), skipped)


def _build_for_weights(cls: type, rules: Mapping[str, Any]) -> list[torch.nn.Parameter]:
    from cudagym.synth.probe import PROBE_DIMS, resolve_constructor

    args = resolve_constructor(rules, PROBE_DIMS[:4], 8) or {}
    try:
        return list(cls(**args).parameters())
    except Exception:  # probed fine at another rank; a module that cannot be built here has no weights to count
        return []
