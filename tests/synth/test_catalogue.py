"""The catalogue: what introspection and probing find for each kind of op, and its file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cudagym.synth import catalogue as catalogue_module
from cudagym.synth.catalogue import Catalogue, load_catalogue
from cudagym.synth.probe import classify, probe_function


def test_probed_shape_rules_constructors_and_arity(small_catalogue: Catalogue) -> None:
    linear = small_catalogue.by_name("torch.nn.Linear")
    assert linear.kind == "module" and linear.has_weights
    assert dict(linear.constructor) == {"in_features": "dim:-1", "out_features": "new"}
    assert linear.shape_rules[2] == ("same", "new")
    conv = small_catalogue.by_name("torch.nn.Conv2d")
    assert conv.constructor["kernel_size"] == 3 and conv.constructor["padding"] == 1
    assert conv.ranks == (4,) or 4 in conv.ranks
    assert conv.shape_rules[4] == ("same", "new", "same", "same")
    assert small_catalogue.by_name("torch.nn.MaxPool2d").shape_rules[4] == ("same", "same", "half", "half")
    assert small_catalogue.by_name("torch.sum").kwargs == {"dim": -1, "keepdim": True}
    assert small_catalogue.by_name("torch.sum").shape_rules[3] == ("same", "same", "one")
    assert small_catalogue.by_name("torch.add").arity == 2
    assert small_catalogue.by_name("torch.nn.Softmax").constructor == {"dim": -1}  # never the deprecated implicit dim
    assert (
        "float16" in small_catalogue.by_name("torch.tanh").dtypes
        or "bfloat16" in small_catalogue.by_name("torch.tanh").dtypes
    )


def test_determinism_and_skips_are_recorded(small_catalogue: Catalogue) -> None:
    assert small_catalogue.by_name("torch.nn.Dropout").deterministic is False
    assert "torch.nn.Dropout" not in {op.name for op in small_catalogue.composable()}
    assert small_catalogue.by_name("torch.tanh").deterministic
    assert small_catalogue.skipped["torch.nn.Identity"] == "output is the input"


def test_transformers_blocks_when_installed(small_catalogue: Catalogue) -> None:
    pytest.importorskip("transformers")
    norm = small_catalogue.by_name("transformers.models.llama.modeling_llama.LlamaRMSNorm")
    assert norm.family == "transformers" and norm.constructor == {"hidden_size": "dim:-1"}
    assert small_catalogue.by_name("transformers.models.llama.modeling_llama.rotate_half").kind == "function"
    assert small_catalogue.transformers_version is not None
    assert "transformers" in small_catalogue.version


def test_file_round_trip_and_version(small_catalogue: Catalogue, tmp_path: Path) -> None:
    path = small_catalogue.save(tmp_path / "c.json")
    again = load_catalogue(path)
    assert again == small_catalogue
    assert small_catalogue.version.startswith(f"{catalogue_module.SCHEMA}-torch{torch.__version__}")
    path.write_text(path.read_text().replace('"schema": 1', '"schema": 99'))
    with pytest.raises(ValueError, match="schema 99"):
        load_catalogue(path)


def test_probe_of_a_function_that_changes_rank_is_refused() -> None:
    assert classify((4, 6), (4,)) is None
    assert not probe_function(torch.flatten).usable
