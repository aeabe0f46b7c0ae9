"""Fixtures of the synthesis tests: a small catalogue (probed once per session) and fast filter settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.synth.catalogue import Catalogue, build_catalogue
from cudagym.synth.filters import FilterConfig

SMALL_CATALOGUE = (
    "torch.nn.Linear",
    "torch.nn.Conv2d",
    "torch.nn.LayerNorm",
    "torch.nn.GroupNorm",
    "torch.nn.MaxPool2d",
    "torch.nn.ReLU",
    "torch.nn.GELU",
    "torch.nn.Dropout",
    "torch.nn.Identity",
    "torch.nn.Softmax",
    "torch.tanh",
    "torch.sigmoid",
    "torch.add",
    "torch.mul",
    "torch.sub",
    "torch.sum",
    "torch.mean",
    "torch.amax",
    "torch.nn.functional.silu",
    "torch.nn.functional.log_softmax",
    "transformers.activations.NewGELUActivation",
    "transformers.models.llama.modeling_llama.LlamaRMSNorm",
    "transformers.models.llama.modeling_llama.rotate_half",
)
"""The candidates the tests' catalogue probes: every kind of op (layers, norms, pooling, activations, binary ops,
reductions, a stochastic one, an identity, transformers blocks)."""


@pytest.fixture(scope="session")
def small_catalogue() -> Catalogue:
    return build_catalogue(only=SMALL_CATALOGUE)


@pytest.fixture(scope="session")
def catalogue_file(small_catalogue: Catalogue, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return small_catalogue.save(tmp_path_factory.mktemp("catalogue") / "catalogue.json")


@pytest.fixture(scope="session")
def synth_filters(fast_config: EvalConfig) -> FilterConfig:
    """The cpu window, the tests' fast timing, no torch.compile (its tests ask for it)."""
    return FilterConfig.for_backend("cpu", eval=fast_config, check_compile=False)
