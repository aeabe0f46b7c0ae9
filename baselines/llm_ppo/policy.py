"""The actor, the critic and the frozen reference: Hugging Face models, and the per-token quantities PPO needs.

The actor is any causal LM (``AutoModelForCausalLM``). The critic is the same architecture as a token classifier
with one output (``AutoModelForTokenClassification``, ``num_labels=1``): its trunk starts from the actor's weights
and its head is new, so value pretraining changes the critic and never the actor (CUDA Agent trains them as two
models too, with their own learning rates). The reference is a frozen copy of the actor as a stage starts; the KL
term keeps the actor near it. With peft installed, ``lora_rank`` trains LoRA adapters on the actor instead of all
of its weights.

Positions: ``logprobs[:, t]`` is the log-probability of token ``t`` given the tokens before it, and
``values[:, t]`` the critic's value of the state in which token ``t`` is chosen (both read at position ``t - 1``;
position 0 is 0).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from pathlib import Path
from typing import Any

import torch

from cudagym.baselines.llm_ppo.tiny import TINY_MODEL, build_tiny_model, build_tiny_tokenizer

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class Policy:
    """The models of one run.

    Attributes:
        tokenizer: the actor's tokenizer (left padding for generation).
        actor: the causal LM that acts.
        critic: the value model (token classifier with one output).
        reference: the frozen actor the KL term measures against (None until :meth:`freeze_reference`).
        device: where the models live.
    """

    tokenizer: Any
    actor: Any
    critic: Any
    reference: Any = None
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))

    def freeze_reference(self) -> None:
        """Makes the reference a frozen copy of the actor as it is now."""
        reference = copy.deepcopy(self.actor)
        reference.eval()
        for parameter in reference.parameters():
            parameter.requires_grad_(False)
        self.reference = reference

    def save(self, folder: str | Path) -> Path:
        """Writes the actor (with the tokenizer) to ``folder/actor`` and the critic to ``folder/critic``; LoRA adapters
        are merged into the saved actor, so that ``init=folder`` loads it as a plain model."""
        folder = Path(folder)
        actor = self.actor
        if hasattr(actor, "merge_and_unload"):  # a peft model
            actor = copy.deepcopy(actor).merge_and_unload()
        actor.save_pretrained(folder / "actor")
        self.tokenizer.save_pretrained(folder / "actor")
        self.critic.save_pretrained(folder / "critic")
        return folder


def resolve_device(device: str) -> torch.device:
    """The torch device of "auto" (cuda where available), "cpu", "cuda" or "cuda:N"."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def critic_like(actor: Any) -> Any:
    """A token-classification critic of the actor's architecture, its trunk a copy of the actor's."""
    from transformers import AutoModelForTokenClassification

    config = copy.deepcopy(actor.config)
    config.num_labels = 1
    config.classifier_dropout = 0.0
    critic = AutoModelForTokenClassification.from_config(config)
    critic.base_model.load_state_dict(actor.base_model.state_dict())
    critic.to(dtype=next(actor.parameters()).dtype)
    return critic


def load_policy(
    model: str,
    *,
    init: str | Path | None = None,
    corpus: list[str] | None = None,
    device: str = "auto",
    dtype: str = "float32",
    lora_rank: int | None = None,
    tiny_size: tuple[int, int] = (64, 2),
) -> Policy:
    """The actor, critic and tokenizer of a run.

    Args:
        model: a Hugging Face model name or folder, or ``"tiny"`` (built here from ``corpus``: no download).
        init: a checkpoint folder an earlier stage wrote (``actor/`` and ``critic/``); it replaces ``model``.
        corpus: the tiny tokenizer's training text (``tiny.tiny_corpus``); needed with ``"tiny"``.
        device: "auto", "cpu" or "cuda[:N]".
        dtype: "float32", "bfloat16" or "float16".
        lora_rank: train LoRA adapters of this rank on the actor (needs peft); None: all weights.
        tiny_size: the tiny model's hidden size and layer count.
    """
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

    torch_dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}.get(dtype)
    if torch_dtype is None:
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    where = resolve_device(device)
    if init is not None:
        init = Path(init)
        if not (init / "actor").is_dir() or not (init / "critic").is_dir():
            raise FileNotFoundError(f"{init} is not a checkpoint of this recipe (no actor/ and critic/ in it)")
        tokenizer = AutoTokenizer.from_pretrained(init / "actor")
        actor = AutoModelForCausalLM.from_pretrained(init / "actor", dtype=torch_dtype)
        critic = AutoModelForTokenClassification.from_pretrained(init / "critic", dtype=torch_dtype)
    elif model == TINY_MODEL:
        if not corpus:
            raise ValueError("the tiny model needs a corpus to train its tokenizer on")
        tokenizer = build_tiny_tokenizer(corpus)
        actor = build_tiny_model(tokenizer, hidden_size=tiny_size[0], layers=tiny_size[1]).to(torch_dtype)
        critic = critic_like(actor)
    else:
        tokenizer = AutoTokenizer.from_pretrained(model)
        actor = AutoModelForCausalLM.from_pretrained(model, dtype=torch_dtype)
        critic = critic_like(actor)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if lora_rank is not None:
        actor = _with_lora(actor, lora_rank)
    logger.info("policy %s: %d actor parameters on %s", model, sum(p.numel() for p in actor.parameters()), where)
    return Policy(tokenizer, actor.to(where), critic.to(where), device=where)


def _with_lora(actor: Any, rank: int) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as error:
        raise ImportError("lora_rank needs peft (pip install peft)") from error
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules="all-linear", task_type="CAUSAL_LM")
    return get_peft_model(actor, config)


def token_logprobs(
    model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, temperature: float = 1.0
) -> torch.Tensor:
    """``[B, T]``: log pi(token t | tokens < t) at sampling ``temperature``; position 0 is 0 (see the module doc)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / temperature
    picked = torch.gather(logits, 2, input_ids[:, 1:, None]).squeeze(2)
    logprobs = picked - torch.logsumexp(logits, dim=-1)
    return torch.nn.functional.pad(logprobs, (1, 0))


def token_values(critic: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, T]``: the value of the state in which token t is chosen; position 0 is 0 (see the module doc)."""
    values = critic(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1, 0].float()
    return torch.nn.functional.pad(values, (1, 0))
