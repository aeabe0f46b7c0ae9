"""Composition: the symbolic shapes the composer infers are the shapes the rendered model computes."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest
import torch

from cudagym.synth.catalogue import Catalogue
from cudagym.synth.compose import Composer, broadcast
from cudagym.synth.pipeline import candidate_footprint
from cudagym.synth.plan import BYTES_PER_ELEMENT, FOOTPRINT_FACTOR, PROFILES, footprint, plan_sizes, shape_values
from cudagym.synth.render import candidate

SMALL_SIZES = {"batch_size": 2, "features": 8, "hidden": 8, "seq_len": 4, "channels": 4, "height": 8, "width": 8}


def test_broadcast() -> None:
    assert broadcast(("b", "f"), ("1", "f")) == ("b", "f")
    assert broadcast(("b", "1"), ("b", "f")) == ("b", "f")
    assert broadcast(("b", "f"), ("b", "g")) is None


def test_inferred_shapes_match_the_rendered_model(small_catalogue: Catalogue) -> None:
    ops = {op.name: op for op in small_catalogue.ops}
    composer = Composer(small_catalogue.composable())
    seen_counts, binary, reductions = set(), 0, 0
    for seed in range(60):
        rng = random.Random(seed)
        composition = composer.compose(rng)
        sizes = {
            name: SMALL_SIZES.get(name, 6) for name in plan_sizes(composition, ops, PROFILES["cpu"], 1.0, rng).sizes
        }
        composition = dataclasses.replace(composition, sizes=sizes)
        made = candidate(composition, ops, seed, seed)
        namespace: dict = {}
        exec(compile(made.code, "model.py", "exec"), namespace)
        model = namespace["Model"](*namespace["get_init_inputs"]())
        inputs = namespace["get_inputs"]()
        assert [tuple(x.shape) for x in inputs] == [tuple(s) for s in made.shapes]
        with torch.no_grad():
            out = model(*inputs)
        assert tuple(out.shape) == shape_values(composition.steps[-1].shape, sizes), made.code
        seen_counts.add(len(composition.steps))
        binary += any(step.operand for step in composition.steps)
        reductions += any("1" in step.shape for step in composition.steps)
        assert made.data_source.endswith(f"#{len(composition.steps)}")
    assert seen_counts == {1, 2, 3, 4, 5}
    assert binary and reductions


def test_ops_range_and_bad_ranges(small_catalogue: Catalogue) -> None:
    composer = Composer(small_catalogue.composable(), (2, 3))
    assert {len(composer.compose(random.Random(s)).steps) for s in range(30)} == {2, 3}
    with pytest.raises(ValueError, match="1-5"):
        Composer(small_catalogue.composable(), (0, 6))


def test_planned_batch_scales_with_the_target(small_catalogue: Catalogue) -> None:
    ops = {op.name: op for op in small_catalogue.ops}
    composition = Composer(small_catalogue.composable()).compose(random.Random(1))
    small = plan_sizes(composition, ops, PROFILES["cpu"], 1.0, random.Random(2)).sizes["batch_size"]
    large = plan_sizes(composition, ops, PROFILES["cpu"], 20.0, random.Random(2)).sizes["batch_size"]
    assert large > small >= 1


def test_a_footprint_counts_every_tensor_of_the_chain(small_catalogue: Catalogue) -> None:
    """The device memory a judgement is assumed to hold (what a worker takes of the shared budget): its inputs and
    each step's output at the planned sizes, ``FOOTPRINT_FACTOR`` times; a candidate with no composition (the LLM
    composer's) is guessed from its inputs and its number of ops."""
    ops = {op.name: op for op in small_catalogue.ops}
    composition = Composer(small_catalogue.composable()).compose(random.Random(3))
    sized = plan_sizes(composition, ops, PROFILES["cpu"], 1.0, random.Random(4))
    tensors = [*sized.inputs, *(step.shape for step in sized.steps)]
    elements = sum(math.prod(shape_values(shape, sized.sizes)) for shape in tensors)
    assert footprint(sized) == FOOTPRINT_FACTOR * BYTES_PER_ELEMENT * elements
    made = candidate(sized, ops, 3, 3)
    assert candidate_footprint(made) == footprint(sized)
    written = dataclasses.replace(made, composition=None, shapes=((4, 8), (8,)), ops=("a", "b"))
    assert candidate_footprint(written) == FOOTPRINT_FACTOR * BYTES_PER_ELEMENT * 40 * 3
