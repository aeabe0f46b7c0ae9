"""cudagym.integrations.trl inside TRL's real ``GRPOTrainer``: one training step with ``environment_factory``.

The model is a randomly initialised two-layer Qwen3 built from a config, with a byte-level BPE tokenizer trained here
on the episode's own text and TRL's bundled Qwen3 chat template: nothing is downloaded. A random model writes no tool
calls, so its sampling is scripted (:class:`ScriptedTurns` answers ``generate`` with each rollout's next assistant
turn); everything else is TRL's: the tool schemas from the methods, ``reset(**row)``, the parsing of the tool calls
and their execution as method calls, ``get_reward()`` as the reward, the advantages, the loss and the optimizer step.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from cudagym_testing import RELU

from cudagym.evaluator import EvalConfig
from cudagym.integrations.trl import PROMPT, CudaKernelToolEnv, make_dataset
from cudagym.tools import TOOLS

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3ForCausalLM

# trl and its libraries are imported by the test that needs them, not when every xdist worker collects this file
needs_trl = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs cudagym[trl]")

# -- the scripted turns: rollout A ends with a real evaluation at tier -1, rollout B stops without a submit -----------

BROKEN_MODEL_NEW = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"  # compiles, has no forward


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call><|im_end|>"


SUBMITS = [
    _call("list_files"),
    _call("write_file", path="model_new.py", content=BROKEN_MODEL_NEW),
    _call("submit"),
    "Submitted.<|im_end|>",
]
STOPS = [_call("read_file", path="model.py", limit=3), "I stop here.<|im_end|>"]
SCRIPTS = [SUBMITS, STOPS]


class ScriptedTurns:
    """Stands in for ``model.generate``: each rollout's next assistant turn, read off the conversation so far.

    The first turn of the ``i``-th rollout in a batch is ``SCRIPTS[i]``'s; later turns follow the script whose first
    turn the conversation holds. Every call is recorded in ``calls`` (how many rows it generated for).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerFast) -> None:
        self.tokenizer = tokenizer
        self.calls: list[int] = []

    def __call__(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, **_: Any) -> torch.Tensor:
        import torch

        turns = []
        for row, (ids, mask) in enumerate(zip(input_ids, attention_mask, strict=True)):
            text = self.tokenizer.decode(ids[mask.bool()])
            done = text.count("<|im_start|>assistant") - 1  # the last header opens the turn to write
            script = SCRIPTS[row] if done == 0 else next(s for s in SCRIPTS if s[0] in text)
            turns.append(self.tokenizer.encode(script[done], add_special_tokens=False))
        self.calls.append(len(turns))
        width = max(len(t) for t in turns)
        pad = self.tokenizer.pad_token_id
        new = torch.tensor([t + [pad] * (width - len(t)) for t in turns], dtype=input_ids.dtype)
        return torch.cat([input_ids, new], dim=1)


# -- a tokenizer and a model built here ----------------------------------------------------------------------------

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
TAG_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]


def build_tokenizer(corpus: list[str]) -> PreTrainedTokenizerFast:
    """A byte-level BPE (any text encodes) trained on ``corpus``, with Qwen's special tokens and TRL's Qwen3
    template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import qwen3_chat_template

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4000,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>", padding_side="left"
    )
    tokenizer.add_special_tokens({"additional_special_tokens": SPECIAL_TOKENS})
    tokenizer.add_tokens(TAG_TOKENS)
    tokenizer.chat_template = qwen3_chat_template
    return tokenizer


def build_model(tokenizer: PreTrainedTokenizerFast) -> Qwen3ForCausalLM:
    """A randomly initialised two-layer Qwen3 (a few hundred thousand parameters)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
        max_position_embeddings=65536,  # TRL stops the tool loop at the model's length: the workspace text is long
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        tie_word_embeddings=True,
    )
    return Qwen3ForCausalLM(config)


@needs_trl
@pytest.mark.slow  # imports TRL and trains a step; CI runs it (only the gpu marker is deselected)
def test_grpo_step_with_the_environment_factory(
    tmp_path: Path, fast_config: EvalConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL
    made: list[CudaKernelToolEnv] = []

    def factory() -> CudaKernelToolEnv:
        made.append(CudaKernelToolEnv(backend="cpu", eval_config=fast_config, max_turns=10))
        return made[-1]

    with CudaKernelToolEnv(backend="cpu", eval_config=fast_config) as probe:
        first_observation = probe.reset(task_id=RELU)
    schemas = json.dumps([tool.model_json_schema() for tool in TOOLS])
    tokenizer = build_tokenizer([PROMPT, first_observation, schemas, *SUBMITS, *STOPS] * 4)
    model = build_model(tokenizer)
    before = {name: parameter.detach().clone() for name, parameter in model.named_parameters()}
    scripted = ScriptedTurns(tokenizer)
    model.generate = scripted  # the sampling only: forward, log-probabilities and gradients are the model's

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        train_dataset=Dataset.from_list(make_dataset(ids=[RELU])),
        environment_factory=factory,
        args=GRPOConfig(
            output_dir=str(tmp_path),
            per_device_train_batch_size=2,
            num_generations=2,
            max_steps=1,
            max_completion_length=2048,
            max_tool_calling_iterations=6,
            learning_rate=1e-2,
            logging_steps=1,
            report_to="none",
            save_strategy="no",
            use_cpu=True,
            seed=0,
        ),
    )
    trainer.train()

    assert trainer.state.global_step == 1
    # TRL turned the methods into the eight tools, with the schemas the tool models declare
    names = [tool.__name__ for tool in trainer.tools]
    assert sorted(names) == sorted(tool.tool_name() for tool in TOOLS)
    # both rollouts ran their scripts through the pooled instances: rollout A to its submit, rollout B to its stop
    played = sorted((env.account.turns, env.account.episode_return) for env in made if env.account is not None)
    assert played == [(1, 0.0), (3, -1.0)]
    submitted = next(env.account for env in made if env.account is not None and env.account.submitted)
    assert (submitted.task_id, submitted.tier, submitted.compiled, submitted.correct) == (RELU, -1, True, False)
    assert scripted.calls == [2, 2, 1, 1]  # the first turns, then TRL's tool loop one rollout at a time
    # get_reward() was the reward, logged under the class name; the different returns made a real update
    logged = trainer.state.log_history[0]
    assert logged["rewards/CudaKernelToolEnv/mean"] == pytest.approx(-0.5)
    assert logged["tools/call_frequency"] > 0 and logged["tools/failure_frequency"] == 0
    changed = [name for name, parameter in model.named_parameters() if not torch.equal(parameter, before[name])]
    assert changed, "the optimizer step changed no parameter"
    for env in made:
        env.__exit__(None, None, None)
        assert env.gym_env is None


# -- the class's contract with TRL, without TRL's trainer ------------------------------------------------------------


def _documented_arguments(doc: str) -> dict[str, str]:
    lines = inspect.cleandoc(doc).splitlines()
    if "Args:" not in lines:
        return {}
    out = {}
    for line in lines[lines.index("Args:") + 1 :]:
        name, _, description = line.strip().partition(": ")
        out[name] = description
    return out


def test_methods_match_the_tool_models() -> None:
    public = {name for name, _ in inspect.getmembers(CudaKernelToolEnv, inspect.isfunction) if not name.startswith("_")}
    assert public == {t.tool_name() for t in TOOLS} | {"reset", "get_reward"}
    kinds = {"string": str, "integer": int, "boolean": bool}
    for tool in TOOLS:
        method = getattr(CudaKernelToolEnv, tool.tool_name())
        signature = inspect.signature(method, eval_str=True)
        parameters = list(signature.parameters.values())[1:]  # without self
        schema = tool.model_json_schema()
        properties = schema.get("properties", {})
        assert [p.name for p in parameters] == list(properties)
        for parameter in parameters:
            prop = properties[parameter.name]
            assert parameter.annotation is kinds[prop["type"]]
            required = parameter.name in schema.get("required", [])
            assert (parameter.default is inspect.Parameter.empty) == required
            if not required:
                assert parameter.default == prop["default"]
        assert inspect.cleandoc(method.__doc__).splitlines()[0] == tool.__doc__
        assert _documented_arguments(method.__doc__) == {k: v["description"] for k, v in properties.items()}
        assert signature.return_annotation is str


def test_rows_choose_the_task_and_the_episode_is_scored(fast_config: EvalConfig) -> None:
    rows = make_dataset(ids=[RELU])
    assert rows == [{"prompt": [{"role": "user", "content": PROMPT}], "task_id": RELU}]
    with CudaKernelToolEnv(backend="cpu", eval_config=fast_config, max_turns=10) as env:
        with pytest.raises(RuntimeError, match="reset"):
            env.list_files()
        with pytest.raises(RuntimeError, match="reset"):
            env.get_reward()
        first = env.reset(**rows[0])
        assert first.startswith("# Task: ReLU (builtin/relu)") and "class Model" in first
        assert env.get_reward() == 0.0
        assert "model_new.py" in env.list_files()
        text = env.read_file("model.py", limit=2)
        assert "2| import torch.nn" in text and "\n3|" not in text
        assert "Nothing to compile" in env.submit()  # an empty workspace: tier -1 at once
        assert env.get_reward() == -1.0
        assert env.account is not None and env.account.reward_terms == {"tier": -1.0}
        assert "episode has ended" in env.verify() and env.get_reward() == -1.0 and env.account.turns == 3
        env.reset(seed=3, prompt="ignored")
        assert env.get_reward() == 0.0 and env.account.turns == 0
        workspace = env.gym_env.workspace.path
    assert not workspace.exists() and env.gym_env is None
