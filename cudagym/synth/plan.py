"""Sizes: the values of a composition's size names, chosen so that the task's eager time lands in the window.

Every dimension but the batch comes from a small set per role (features, channels, spatial sizes); the batch is then
scaled so that a cost model of the chain (bytes moved over the device's bandwidth, or multiply-adds over its
arithmetic rate, whichever is longer, per op) meets the target time, the geometric middle of the window's lower part
(:func:`target_ms`), within a memory cap. The model is a first guess: the execution filter measures the real eager
time in the trusted reference process, and a candidate outside the window gets one more try at a batch scaled by the
measured ratio (:func:`rescale`).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Mapping

from cudagym.synth.catalogue import OpSpec
from cudagym.synth.records import Composition

ROLE_VALUES: Mapping[str, tuple[int, ...]] = {
    "features": (256, 512, 1024, 2048),
    "hidden": (256, 512, 1024),
    "seq_len": (64, 128, 256),
    "channels": (16, 32, 64),
    "depth": (8, 16),
    "height": (32, 64, 128),
    "width": (32, 64, 128),
}
"""The values a size of each role is drawn from (``out_features`` takes the features' values, and so on)."""
BYTES_PER_ELEMENT = 4


@dataclasses.dataclass(frozen=True)
class DeviceProfile:
    """What the cost model assumes of a device: ``bytes_per_ms`` of memory traffic, ``flops_per_ms`` of fp32
    arithmetic, ``overhead_ms`` per op launch, and ``memory_cap`` bytes of tensors a task may hold."""

    name: str
    bytes_per_ms: float
    flops_per_ms: float
    overhead_ms: float
    memory_cap: int


PROFILES: Mapping[str, DeviceProfile] = {
    # an H200: about 4.8 TB/s of HBM (3 TB/s reached by plain PyTorch ops) and 60 TFLOP/s of fp32 (no TF32); the cap
    # lets a memory-bound chain reach about 2 ms (above the window's 1 ms) while eight workers' tasks fit the 139 GB
    "cuda": DeviceProfile("cuda", 3.0e9, 4.0e10, 0.006, 6 * 1024**3),
    # two shared cores: a few GB/s and a few GFLOP/s
    "cpu": DeviceProfile("cpu", 3.0e6, 1.5e7, 0.01, 256 * 1024**2),
}


def target_ms(min_ms: float, max_ms: float) -> float:
    """The eager time sizes aim at: ``min_ms^0.75 * max_ms^0.25`` (3.2 ms of 1-100 ms; 1.6 ms of 0.5-50 ms), near the
    low end, where the checks cost least, with room for the model's error on both sides."""
    return min_ms**0.75 * max_ms**0.25


def evaluate(expr: str, sizes: Mapping[str, int]) -> int:
    """The value of a shape expression (``name``, ``1``, ``name // 2 // 2``)."""
    head, *halvings = [part.strip() for part in expr.split("//")]
    value = int(head) if head.isdigit() else int(sizes[head])
    for part in halvings:
        value //= int(part)
    return value


def shape_values(shape: tuple[str, ...], sizes: Mapping[str, int]) -> tuple[int, ...]:
    return tuple(evaluate(expr, sizes) for expr in shape)


def _role(name: str) -> str:
    if name.startswith("out_features"):
        return "features"
    if name.startswith("out_channels"):
        return "channels"
    return name


def cost_ms(
    composition: Composition, sizes: Mapping[str, int], ops: Mapping[str, OpSpec], profile: DeviceProfile
) -> float:
    """The cost model's eager time of the chain at ``sizes``."""
    values = [shape_values(composition.inputs[0], sizes)]
    total = 0.0
    for step in composition.steps:
        spec = ops[step.op]
        inp = values[-1]
        out = shape_values(step.shape, sizes)
        n_in, n_out = math.prod(inp), math.prod(out)
        moved = (n_in * spec.arity + n_out) * BYTES_PER_ELEMENT
        flops = float(n_out)
        if "in_features" in step.constructor:
            flops = 2.0 * n_out * evaluate(step.constructor["in_features"], sizes)
        elif "in_channels" in step.constructor:
            flops = 2.0 * n_out * evaluate(step.constructor["in_channels"], sizes) * 3 ** (len(out) - 2)
        elif spec.has_weights:
            moved *= 2  # a norm reads its input twice (statistics, then the normalisation)
        total += max(moved / profile.bytes_per_ms, flops / profile.flops_per_ms) + profile.overhead_ms
        values.append(out)
    return total


def _memory(composition: Composition, sizes: Mapping[str, int]) -> int:
    shapes = [*composition.inputs, *(step.shape for step in composition.steps)]
    return sum(math.prod(shape_values(s, sizes)) for s in shapes) * BYTES_PER_ELEMENT


FOOTPRINT_FACTOR = 2
"""A judgement's peak device memory in multiples of its chain's tensors (:func:`footprint`)."""


def footprint(composition: Composition) -> int:
    """The device memory judging ``composition`` is assumed to hold at its peak: ``FOOTPRINT_FACTOR`` times its tensors
    (every input and every step's output at its sizes): the checks keep two outputs for the determinism check beside
    the inputs, and torch.compile's buffers come on top. A first guess for sharing the device among workers
    (``memory_budget``), not a bound: a candidate that needs more is judged again alone."""
    return FOOTPRINT_FACTOR * _memory(composition, composition.sizes)


def plan_sizes(
    composition: Composition,
    ops: Mapping[str, OpSpec],
    profile: DeviceProfile,
    target: float,
    rng: random.Random,
) -> Composition:
    """``composition`` with sizes: the roles' values drawn from :data:`ROLE_VALUES`, the batch scaled to ``target`` ms
    (at least 1, at most what the memory cap allows)."""
    names: list[str] = []
    for shape in [*composition.inputs, *(step.shape for step in composition.steps)]:
        for expr in shape:
            head = expr.split("//")[0].strip()
            if not head.isdigit() and head not in names:
                names.append(head)
    sizes = {name: 1 if name == "batch_size" else rng.choice(ROLE_VALUES[_role(name)]) for name in names}
    per_batch = cost_ms(composition, sizes, ops, profile) - profile.overhead_ms * len(composition.steps)
    budget = max(target - profile.overhead_ms * len(composition.steps), target / 10)
    batch = max(1, round(budget / max(per_batch, 1e-9)))
    batch = min(batch, max(1, profile.memory_cap // max(_memory(composition, sizes), 1)))
    sizes["batch_size"] = int(batch)
    return dataclasses.replace(composition, sizes=sizes)


def rescale(composition: Composition, measured_ms: float, target: float, memory_cap: int) -> Composition | None:
    """The composition with its batch scaled by ``target / measured_ms`` (eager time grows about linearly with the
    batch); None when the batch cannot move (it is 1 and the task is too slow, or it would not change)."""
    sizes = dict(composition.sizes)
    old = sizes["batch_size"]
    new = max(1, round(old * target / max(measured_ms, 1e-6)))
    unit = _memory(composition, {**sizes, "batch_size": 1})
    new = min(new, max(1, memory_cap // max(unit, 1)))
    if new == old:
        return None
    sizes["batch_size"] = new
    return dataclasses.replace(composition, sizes=sizes)
