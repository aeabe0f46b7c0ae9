"""A tiny causal LM and its tokenizer, built here from a config: no download, for CI and smoke runs.

The tokenizer is a byte-level BPE (any text encodes) trained on text the environment itself writes (the task
instructions and sources, the tool schemas, tool calls in Qwen's ``<tool_call>`` form), with Qwen's special tokens
and TRL's bundled Qwen3 chat template (native tool calls in the system prompt, ``<tool_call>`` blocks, ``tool``
messages as ``<tool_response>``). The model is a randomly initialised Qwen3 of a few layers. It writes no sensible
tool call: it is there to run every mechanism of the recipe for real, not to learn kernels.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from cudagym.backends import resolve_backend
from cudagym.instructions import render_instructions
from cudagym.tasks import Task
from cudagym.tools import tool_schemas

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerFast

logger = logging.getLogger(__name__)

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TAG_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
TINY_MODEL = "tiny"
"""The model name that :func:`cudagym.baselines.llm_ppo.policy.load_policy` builds here instead of loading."""


def tiny_corpus(tasks: Iterable[Task], backend: str = "cpu") -> list[str]:
    """Text to train the tiny tokenizer on: each task's instructions, source and reference solution files for
    ``backend`` (where it has them), the tool schemas and one example call per tool name."""
    from cudagym.baselines.scripted import solution_files

    resolved = resolve_backend(backend)
    corpus = [json.dumps(tool_schemas("openai"))]
    for task in tasks:
        corpus.append(render_instructions(task, resolved, max_turns=200))
        corpus.append(task.source_for(resolved.name))
        if resolved.name in task.solutions:
            corpus.extend(solution_files(task, resolved.name).values())
    for name in ("write_file", "edit_file", "read_file", "list_files", "compile", "verify", "profile", "submit"):
        corpus.append(f'<tool_call>\n{{"name": "{name}", "arguments": {{"path": "model_new.py"}}}}\n</tool_call>')
    return corpus


def build_tiny_tokenizer(corpus: Sequence[str], vocab_size: int = 2000) -> PreTrainedTokenizerFast:
    """A byte-level BPE of ``vocab_size`` tokens trained on ``corpus``, with Qwen's special tokens, left padding and
    TRL's Qwen3 chat template (and its response schema, so that generated tool calls parse into native calls)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import add_response_schema, qwen3_chat_template

    if not corpus:
        raise ValueError("the tokenizer corpus is empty")
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": list(SPECIAL_TOKENS)})
    tokenizer.add_tokens(list(TAG_TOKENS))
    tokenizer.chat_template = qwen3_chat_template
    return add_response_schema(tokenizer)


def build_tiny_model(
    tokenizer: PreTrainedTokenizerFast, *, hidden_size: int = 64, layers: int = 2, seed: int = 0
) -> PreTrainedModel:
    """A randomly initialised Qwen3 causal LM sized for ``tokenizer`` (``hidden_size`` 64 and 2 layers: about half
    a million parameters with a 2,000-token vocabulary)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if hidden_size < 16 or hidden_size % 16:
        raise ValueError(f"hidden_size must be a positive multiple of 16, got {hidden_size}")
    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=hidden_size // 16,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=131072,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(config)
