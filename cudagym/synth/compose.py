"""The rule-based composer: chains 1 to 5 catalogue ops with shape inference.

Shapes are symbolic: each dimension is an expression of module-level size names (``batch_size``, ``features``,
``height // 2``, ``1``), so that ``plan.py`` can choose the sizes afterwards and the rendered task keeps KernelBench's
form. Each step reads the previous value; the op's probed rule for the current rank (``OpSpec.shape_rules``) gives the
next shape. A binary op takes as its second operand a new input of the same shape, a new input that broadcasts (its
batch dimension 1: a bias), or an earlier value (a residual, broadcast where the chain reduced a dimension to 1).
A reduction keeps its dimension (``keepdim``), so what follows can broadcast against the values before it.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from cudagym.errors import CudaGymError
from cudagym.synth import hints
from cudagym.synth.catalogue import OpSpec
from cudagym.synth.records import Composition, Step

RANK_DIMS: Mapping[int, tuple[str, ...]] = {
    2: ("batch_size", "features"),
    3: ("batch_size", "seq_len", "hidden"),
    4: ("batch_size", "channels", "height", "width"),
    5: ("batch_size", "channels", "depth", "height", "width"),
}
"""The size names of a rank's first input."""
OPS_WEIGHTS: Mapping[int, int] = {1: 1, 2: 4, 3: 5, 4: 4, 5: 3}
"""Relative weights of the number of ops per task (most of Ops-6K's tasks compose several ops)."""
HEAVY_FIRST = 0.7
"""The chance that the first op is one with weights (a linear layer, a convolution, a norm), as in most Ops-6K
tasks."""
MAX_HALVINGS = 2


class ComposeError(CudaGymError, ValueError):
    """No op of the catalogue fits the chain at some step."""


def draw_ops_count(rng: random.Random, low: int, high: int) -> int:
    """A number of ops in ``[low, high]`` by :data:`OPS_WEIGHTS`."""
    counts = [n for n in OPS_WEIGHTS if low <= n <= high]
    if not counts:
        raise ValueError(f"ops per task must lie within 1-5, got {low}-{high}")
    return rng.choices(counts, weights=[OPS_WEIGHTS[n] for n in counts])[0]


def _halved(expr: str) -> str:
    return f"{expr} // 2"


def _dim_ok(expr: str) -> bool:
    """Whether a dimension may be changed or read by an op: not reduced to 1, not halved too often."""
    return expr != "1" and expr.count("//") < MAX_HALVINGS


def admissible(op: OpSpec, shape: Sequence[str]) -> bool:
    """Whether ``op`` can take a value of ``shape``."""
    rules = op.shape_rules.get(len(shape))
    if rules is None:
        return False
    if any(rule != "same" and not _dim_ok(expr) for rule, expr in zip(rules, shape, strict=True)):
        return False
    for rule in op.constructor.values():
        if isinstance(rule, str) and rule.startswith("dim:") and not _dim_ok(shape[int(rule[4:])]):
            return False
    return True


def broadcast(a: Sequence[str], b: Sequence[str]) -> tuple[str, ...] | None:
    """The broadcast shape of two symbolic shapes of one rank, or None when they do not broadcast."""
    if len(a) != len(b):
        return None
    out = []
    for x, y in zip(a, b, strict=True):
        if x == y or y == "1":
            out.append(x)
        elif x == "1":
            out.append(y)
        else:
            return None
    return tuple(out)


class Composer:
    """Draws compositions from the composable ops of a catalogue.

    Args:
        ops: the catalogue's composable ops (deterministic).
        ops_range: the smallest and largest number of ops per task (within 1-5).
    """

    def __init__(self, ops: Sequence[OpSpec], ops_range: tuple[int, int] = (1, 5)) -> None:
        if not ops:
            raise ValueError("the catalogue has no composable ops")
        low, high = ops_range
        if not 1 <= low <= high <= 5:
            raise ValueError(f"ops per task must be a range within 1-5, got {low}-{high}")
        self.ops = sorted(ops, key=lambda op: op.name)
        self.ops_range = ops_range
        self.heavy = [op for op in self.ops if op.has_weights]

    def compose(self, rng: random.Random) -> Composition:
        """One composition; ComposeError when the chain cannot be continued."""
        count = draw_ops_count(rng, *self.ops_range)
        first = rng.choice(self.heavy if self.heavy and rng.random() < HEAVY_FIRST else self.ops)
        ranks = [r for r in first.ranks if r <= 4] or list(first.ranks)
        shape: tuple[str, ...] = RANK_DIMS[rng.choice(ranks)]
        inputs: list[tuple[str, ...]] = [shape]
        values: list[tuple[str, ...]] = [shape]
        steps: list[Step] = []
        names: set[str] = set(shape)
        for position in range(count):
            if position == 0:
                op = first
            else:
                choices = [o for o in self.ops if admissible(o, shape) and o.name != steps[-1].op]
                if not choices:
                    raise ComposeError(f"no op takes shape {shape} after {steps[-1].op}")
                op = rng.choice(choices)
            operand, other = self._operand(op, shape, values, inputs, rng)
            constructor, new_name = self._constructor(op, shape, names)
            out = self._apply(op, shape, new_name)
            if other is not None:
                merged = broadcast(out, other)
                if merged is None:
                    raise ComposeError(f"{op.name}: operand shape {other} does not broadcast with {out}")
                out = merged
            steps.append(Step(op.name, operand, constructor, out))
            values.append(out)
            shape = out
        return Composition(tuple(inputs), tuple(steps), {})

    def _operand(
        self,
        op: OpSpec,
        shape: tuple[str, ...],
        values: list[tuple[str, ...]],
        inputs: list[tuple[str, ...]],
        rng: random.Random,
    ) -> tuple[str | None, tuple[str, ...] | None]:
        if op.arity == 1:
            return None, None
        residuals = [j for j in range(len(values) - 1) if broadcast(shape, values[j]) is not None]
        kinds = ["input", "bias", *(["residual"] if residuals else [])]
        kind = rng.choice(kinds)
        if kind == "residual":
            j = rng.choice(residuals)
            return f"value:{j}", values[j]
        other = shape if kind == "input" else ("1", *shape[1:])
        inputs.append(other)
        return f"input:{len(inputs) - 1}", other

    def _constructor(self, op: OpSpec, shape: tuple[str, ...], names: set[str]) -> tuple[dict[str, str], str]:
        constructor: dict[str, str] = {}
        new_name = ""
        for param, rule in op.constructor.items():
            if rule == hints.NEW:
                new_name = param
                suffix = 2
                while new_name in names:
                    new_name, suffix = f"{param}_{suffix}", suffix + 1
                names.add(new_name)
                constructor[param] = new_name
            elif isinstance(rule, str) and rule.startswith("dim:"):
                constructor[param] = shape[int(rule[4:])]
            else:
                constructor[param] = repr(rule)
        return constructor, new_name

    @staticmethod
    def _apply(op: OpSpec, shape: tuple[str, ...], new_name: str) -> tuple[str, ...]:
        out = []
        for rule, expr in zip(op.shape_rules[len(shape)], shape, strict=True):
            if rule == "same":
                out.append(expr)
            elif rule == "new":
                if not new_name:
                    raise ComposeError(f"{op.name} sets a new size but takes no constructor argument for it")
                out.append(new_name)
            elif rule == "half":
                out.append(_halved(expr))
            else:
                out.append("1")
        return tuple(out)
