"""Rendering a composition as a task in KernelBench's format: module-level size constants, a ``Model`` whose
constructor takes the sizes its layers need (given by ``get_init_inputs``), a ``forward`` that runs the chain, and
``get_inputs`` drawing normal inputs of the planned shapes.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from cudagym.synth.catalogue import OpSpec
from cudagym.synth.plan import shape_values
from cudagym.synth.records import Candidate, Composition

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def data_source(ops: list[OpSpec] | tuple[OpSpec, ...]) -> str:
    """Ops-6K's ``data_source``: ``"torch#N"``, or ``"transformers#N"`` when a transformers block is in it."""
    family = "transformers" if any(op.family == "transformers" for op in ops) else "torch"
    return f"{family}#{len(ops)}"


def _attribute(op: OpSpec, index: int) -> str:
    return f"{_CAMEL.sub('_', op.attr).lower()}_{index}"


def _call_args(op: OpSpec) -> str:
    return "".join(f", {key}={value!r}" for key, value in op.kwargs.items())


def render(composition: Composition, ops: Mapping[str, OpSpec]) -> str:
    """The task's source for a composition with sizes (``plan.plan_sizes``)."""
    specs = [ops[step.op] for step in composition.steps]
    imports = sorted({spec.module for spec in specs if spec.family != "torch"})
    init_names: list[str] = []
    members: list[str] = []
    body: list[str] = []
    extra_inputs = [f"y{k}" for k in range(1, len(composition.inputs))]
    values = ["x"]
    for index, (step, spec) in enumerate(zip(composition.steps, specs, strict=True)):
        target = f"v{index + 1}"
        args = [values[-1]]
        if step.operand is not None:
            kind, _, number = step.operand.partition(":")
            args.append(extra_inputs[int(number) - 1] if kind == "input" else values[int(number)])
        if spec.kind == "module":
            for value in step.constructor.values():
                if value.isidentifier() and value not in init_names:
                    init_names.append(value)
            ctor = ", ".join(f"{key}={value}" for key, value in step.constructor.items())
            name = _attribute(spec, index)
            members.append(f"        self.{name} = {spec.name}({ctor})")
            body.append(f"        {target} = self.{name}({', '.join(args)})")
        else:
            body.append(f"        {target} = {spec.name}({', '.join(args)}{_call_args(spec)})")
        values.append(target)
    chain = " -> ".join(spec.attr for spec in specs)
    lines = ["import torch", "import torch.nn as nn", *(f"import {module}" for module in imports), ""]
    lines += [f"{name} = {value}" for name, value in composition.sizes.items()]
    lines += ["", "", "class Model(nn.Module):", f'    """{chain}."""', ""]
    lines += [f"    def __init__(self{''.join(', ' + n for n in init_names)}):", "        super().__init__()"]
    lines += members
    lines += ["", f"    def forward(self, {', '.join(['x', *extra_inputs])}):", *body, f"        return {values[-1]}"]
    shapes = [", ".join(shape) + ("," if len(shape) == 1 else "") for shape in composition.inputs]
    lines += ["", "", "def get_inputs():", f"    return [{', '.join(f'torch.randn({s})' for s in shapes)}]"]
    lines += ["", "", "def get_init_inputs():", f"    return [{', '.join(init_names)}]", ""]
    return "\n".join(lines)


def candidate(
    composition: Composition, ops: Mapping[str, OpSpec], index: int, seed: int, origin: str = "rule"
) -> Candidate:
    """The rendered candidate of a sized composition."""
    specs = [ops[step.op] for step in composition.steps]
    return Candidate(
        index=index,
        seed=seed,
        code=render(composition, ops),
        ops=composition.ops,
        data_source=data_source(specs),
        shapes=tuple(shape_values(shape, composition.sizes) for shape in composition.inputs),
        origin=origin,
        composition=composition,
    )
