"""What introspecting an operator cannot tell: how to build one for a given input, and what not to try at all.

The catalogue (``catalogue.py``) reads each candidate's signature and probes it (``probe.py``); what it cannot guess
is the meaning of a required constructor argument. :data:`PARAM_RULES` says it by the parameter's *name*, the same
across torch and transformers (``in_features`` is the input's last dimension wherever it appears), so a new module
with known parameter names joins the catalogue without an entry of its own. A module with a required parameter not
named here is skipped, with the reason kept in the catalogue.
"""

from __future__ import annotations

from typing import Any

LAST = "dim:-1"
"""A constructor argument equal to the input's last dimension."""
CHANNELS = "dim:1"
"""A constructor argument equal to the input's second dimension (channels)."""
NEW = "new"
"""A constructor argument that is a new size: the output's size along the dimension the op changes."""

PARAM_RULES: dict[str, Any] = {
    "in_features": LAST,
    "out_features": NEW,
    "normalized_shape": LAST,
    "hidden_size": LAST,
    "num_features": CHANNELS,
    "in_channels": CHANNELS,
    "out_channels": NEW,
    "num_channels": CHANNELS,
    "num_groups": 2,
    "kernel_size": 3,
}
"""Required (or shape-bound) constructor parameters by name: a rule above, or a literal value."""

NONE_DEFAULTS: dict[str, Any] = {"dim": -1}
"""Parameters whose ``None`` default is resolved at call time with a deprecation warning (``nn.Softmax(dim=None)``):
given explicitly."""

CLASS_OVERRIDES: dict[str, dict[str, Any]] = {
    "Conv": {"kernel_size": 3, "padding": 1},
    "Pool": {"kernel_size": 2},
}
"""Literal constructor arguments for classes whose name contains the key: convolutions keep their spatial size
(kernel 3, padding 1), pooling halves it (kernel 2)."""

FUNCTION_KWARGS: tuple[dict[str, Any], ...] = ({}, {"dim": -1}, {"dim": -1, "keepdim": True})
"""Keyword arguments a tensor function is probed with, in order: the first that gives a usable output is kept
(``softmax`` needs ``dim``; a reduction keeps its rank with ``keepdim``)."""

EXCLUDED_NAMES = frozenset(
    {
        # change global state or read the machine rather than compute
        "torch.manual_seed",
        "torch.seed",
        "torch.set_default_dtype",
        "torch.nn.functional.dropout",  # stochastic by default, caught by the probe too; kept out to save time
        "torch.empty_like",  # uninitialised memory
        "torch.nn.SyncBatchNorm",  # needs a process group on a GPU
    }
)
"""Callables never probed."""

EXCLUDED_PREFIXES = ("set_", "_", "is_", "use_", "get_", "Lazy")
"""Name prefixes of callables that configure or query rather than compute, and of the lazy modules (the same ops as
their plain classes, with the sizes inferred): never probed."""

TRANSFORMERS_MODULES = (
    "transformers.activations",
    "transformers.models.llama.modeling_llama",
    "transformers.models.t5.modeling_t5",
    "transformers.models.gemma.modeling_gemma",
)
"""The transformers modules scanned for building blocks (activations, norms, rotary helpers) that need no weights
download; only what probes as a usable op is kept."""
