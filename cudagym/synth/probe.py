"""Probing one operator on small sample inputs: which ranks it takes, what it does to each dimension, which dtypes it
runs in, and whether it is deterministic.

The probe runs the installed torch's own code (never an agent's) in the process that builds the catalogue. Inputs of
rank 2 to 5 have distinct sizes (:data:`PROBE_DIMS`), so each output dimension can be told apart: kept (``same``), set
to the new size a constructor argument asked for (``new``), halved (``half``) or reduced to one (``one``). An op is
usable at a rank when its output is a floating tensor of the same rank and dtype, finite on normal inputs, not the
input itself and not the same for two different inputs.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

from cudagym.synth import hints

PROBE_DIMS = (4, 6, 10, 14, 22)
"""Sizes of the sample inputs' dimensions (a rank-r input takes the first r)."""
NEW_SIZE = 18
"""The new size given to constructor arguments ruled ``new`` while probing."""
RANKS = (2, 3, 4, 5)
EXTRA_DTYPES = ("float16", "bfloat16")
DIM_RULES = ("same", "new", "half", "one")
"""What an op does to one dimension: keeps it, sets it to a new size, halves it, reduces it to one."""


@dataclasses.dataclass(frozen=True)
class ProbeResult:
    """What probing found.

    Attributes:
        arity: how many tensor inputs the call took (1, or 2 for a binary op of same-shaped operands).
        kwargs: the keyword arguments of the call that worked (``hints.FUNCTION_KWARGS``).
        shape_rules: rank -> one rule of :data:`DIM_RULES` per output dimension, for each rank the op takes.
        dtypes: the floating dtypes it ran in (float32 always, when usable).
        deterministic: two calls on the same input under different global seeds gave the same output.
        error: why the op is not usable (empty when it is).
    """

    arity: int = 1
    kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    shape_rules: Mapping[int, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    dtypes: tuple[str, ...] = ()
    deterministic: bool = False
    error: str = ""

    @property
    def usable(self) -> bool:
        return not self.error and bool(self.shape_rules)


def resolve_constructor(rules: Mapping[str, Any], shape: tuple[int, ...], new_size: int) -> dict[str, Any] | None:
    """Constructor arguments for an input of ``shape``: the rules of ``hints`` made concrete; None when a rule needs
    a dimension the shape lacks."""
    args: dict[str, Any] = {}
    for name, rule in rules.items():
        if rule == hints.NEW:
            args[name] = new_size
        elif isinstance(rule, str) and rule.startswith("dim:"):
            index = int(rule[4:])
            if index >= len(shape) or -index > len(shape):
                return None
            args[name] = shape[index]
        else:
            args[name] = rule
    return args


def classify(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> tuple[str, ...] | None:
    """One rule per output dimension, or None when the output's rank differs or a dimension fits no rule."""
    if len(in_shape) != len(out_shape):
        return None
    rules = []
    for before, after in zip(in_shape, out_shape, strict=True):
        if after == before:
            rules.append("same")
        elif after == NEW_SIZE:
            rules.append("new")
        elif after == before // 2:
            rules.append("half")
        elif after == 1:
            rules.append("one")
        else:
            return None
    return tuple(rules)


def _inputs(rank: int, arity: int, seed: int, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(PROBE_DIMS[:rank], generator=generator).to(dtype) for _ in range(arity)]


def _usable_output(out: Any, inputs: list[torch.Tensor], other: Any) -> str:
    """Why ``out`` is not a usable output ('' when it is); ``other`` is the output on different inputs."""
    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return "output is not a floating tensor"
    if out.dtype != inputs[0].dtype:
        return f"output dtype {out.dtype} differs from the input's"
    if not torch.isfinite(out).all():
        return "output not finite on normal inputs"
    if out.shape == inputs[0].shape and torch.equal(out, inputs[0]):
        return "output is the input"
    if isinstance(other, torch.Tensor) and other.shape == out.shape and torch.equal(other, out):
        return "output does not depend on the input"
    return ""


def probe_call(make: Callable[[tuple[int, ...]], Callable[..., Any] | None], arity: int) -> ProbeResult:
    """Probes ``make(shape)(*inputs)`` at every rank; ``make`` returns None where it cannot build for a shape."""
    rules: dict[int, tuple[str, ...]] = {}
    first_error = ""
    chosen: tuple[int, Callable[..., Any]] | None = None
    for rank in RANKS:
        try:
            fn = make(PROBE_DIMS[:rank])
            if fn is None:
                continue
            inputs, others = _inputs(rank, arity, 0), _inputs(rank, arity, 1)
            with torch.no_grad():
                out, other = fn(*inputs), fn(*others)
        except Exception as exc:  # an op that refuses this rank: probed, not a failure of the catalogue
            first_error = first_error or f"{type(exc).__name__}: {str(exc).splitlines()[0][:120] if str(exc) else ''}"
            continue
        problem = _usable_output(out, inputs, other)
        rule = classify(PROBE_DIMS[:rank], tuple(out.shape)) if not problem else None
        if rule is None:
            first_error = first_error or problem or f"output shape {tuple(out.shape)} fits no rule"
            continue
        rules[rank] = rule
        chosen = chosen or (rank, fn)
    if chosen is None:
        return ProbeResult(arity=arity, error=first_error or "no rank probed")
    rank, fn = chosen
    return ProbeResult(
        arity=arity,
        shape_rules=rules,
        dtypes=("float32", *_dtypes(fn, rank, arity)),
        deterministic=_deterministic(fn, rank, arity),
    )


def _deterministic(fn: Callable[..., Any], rank: int, arity: int) -> bool:
    inputs = _inputs(rank, arity, 2)
    outputs = []
    for seed in (11, 12):
        torch.manual_seed(seed)
        with torch.no_grad():
            outputs.append(fn(*inputs))
    return torch.equal(outputs[0], outputs[1])


def _dtypes(fn: Callable[..., Any], rank: int, arity: int) -> list[str]:
    found = []
    for name in EXTRA_DTYPES:
        dtype = getattr(torch, name)
        try:
            target = fn.to(dtype) if isinstance(fn, torch.nn.Module) else fn
            with torch.no_grad():
                out = target(*_inputs(rank, arity, 3, dtype))
            if isinstance(out, torch.Tensor) and out.dtype == dtype:
                found.append(name)
        except Exception:  # the op does not run in this dtype: that is what is being asked
            continue
        finally:
            if isinstance(fn, torch.nn.Module):
                fn.to(torch.float32)
    return found


def probe_module(cls: type, constructor: Mapping[str, Any]) -> ProbeResult:
    """Probes an ``nn.Module`` class built with ``constructor`` (rules of ``hints``) for each input shape."""

    def make(shape: tuple[int, ...]) -> Callable[..., Any] | None:
        args = resolve_constructor(constructor, shape, NEW_SIZE)
        if args is None:
            return None
        torch.manual_seed(0)
        return cls(**args)

    return probe_call(make, 1)


def probe_function(fn: Callable[..., Any]) -> ProbeResult:
    """Probes a tensor function: unary then binary, with each keyword set of ``hints.FUNCTION_KWARGS``; the first
    usable form is kept."""
    first: ProbeResult | None = None
    variants = list(hints.FUNCTION_KWARGS)
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        parameters = {}
    if "dim" in parameters and parameters["dim"].default is None:  # an implicit dim is deprecated: say it
        variants = [kwargs for kwargs in variants if "dim" in kwargs]
    for arity in (1, 2):
        for kwargs in variants:
            result = probe_call(lambda shape, kw=kwargs: lambda *xs: fn(*xs, **kw), arity)
            if result.usable:
                return dataclasses.replace(result, kwargs=dict(kwargs))
            first = first or result
    return first or ProbeResult(error="not probed")
