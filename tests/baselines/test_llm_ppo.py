"""cudagym.baselines.llm_ppo: the four stages end to end on a tiny Qwen3 built from a config, and their mechanics.

The model is random (a few hundred thousand parameters, a BPE tokenizer trained here on the task's own text): it
writes no sensible tool call, so these tests check the recipe's mechanics (masks, advantages, KL, losses, what each
stage changes, what it writes), not learning. One module-scoped run plays all four stages on builtin/relu on the
CPU backend; the scripted agent's episode gives the RFT data through ``cudagym rft-export``'s filter.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
import torch
from cudagym_testing import RELU

from cudagym.evaluator import EvalConfig

pytestmark = pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="needs cudagym[trl] (the template)")


@pytest.fixture(scope="module")
def policy() -> Any:
    from cudagym.baselines.llm_ppo import load_policy
    from cudagym.baselines.llm_ppo.tiny import tiny_corpus
    from cudagym.tasks import load

    return load_policy("tiny", corpus=tiny_corpus(load("builtin", ids=[RELU])), device="cpu")


@pytest.fixture(scope="module")
def renderer(policy: Any) -> Any:
    from cudagym.baselines.llm_ppo.render import ChatRenderer
    from cudagym.tools import tool_schemas

    return ChatRenderer(policy.tokenizer, tool_schemas("openai"))


def _state(model: Any) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _changed(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


@dataclasses.dataclass
class Run:
    report: Any
    out: Path
    initial_actor: dict[str, torch.Tensor]
    initial_critic: dict[str, torch.Tensor]


@pytest.fixture(scope="module")
def run(policy: Any, fast_config: EvalConfig, tmp_path_factory: pytest.TempPathFactory) -> Run:
    from cudagym.baselines.llm_ppo import PPOSettings, RecipeSpec, run_recipe

    out = tmp_path_factory.mktemp("llm_ppo")
    initial_actor, initial_critic = _state(policy.actor), _state(policy.critic)
    settings = PPOSettings(
        max_new_tokens=12, minibatch=2, sft_epochs=1, value_epochs=2, actor_lr=1e-3, critic_lr=1e-3, kl_coef=0.1
    )
    spec = RecipeSpec(
        out=out,
        task_ids=(RELU,),
        backend="cpu",
        eval_config=dataclasses.replace(fast_config, compile_baseline=False),  # a tier needs no torch.compile here
        envs=2,
        single_turn_steps=1,
        agentic_steps=1,
        max_turns=2,
        settings=settings,
        device="cpu",
    )
    return Run(run_recipe(spec, policy), out, initial_actor, initial_critic)


# -- mechanics on hand-made data -------------------------------------------------------------------------------------


def test_gae_matches_a_hand_computation() -> None:
    from cudagym.baselines.llm_ppo.advantages import gae, token_rewards

    mask = torch.tensor([0, 1, 1, 0, 0, 1, 0])  # two turns: tokens 1-2, then (after a tool output) token 5
    values = torch.tensor([9.0, 0.5, 0.2, 9.0, 9.0, 0.1, 9.0])  # the 9s are masked out: they must not count
    rewards = token_rewards(7, [2, 5], [1.0, 2.0])
    advantages, returns = gae(rewards, values, mask, gamma=0.9, lam=0.8)
    # by hand, over the policy's tokens 1, 2, 5 only:
    a5 = 2.0 - 0.1
    a2 = (1.0 + 0.9 * 0.1 - 0.2) + 0.9 * 0.8 * a5
    a1 = (0.0 + 0.9 * 0.2 - 0.5) + 0.9 * 0.8 * a2
    expected = torch.tensor([0.0, a1, a2, 0.0, 0.0, a5, 0.0])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(returns, (expected + values) * mask, atol=1e-6)
    _, monte_carlo = gae(rewards, values, mask, gamma=1.0, lam=1.0)  # gamma = lambda = 1: the reward still to come
    assert torch.allclose(monte_carlo, torch.tensor([0.0, 3.0, 3.0, 0.0, 0.0, 2.0, 0.0]))


def test_a_turn_end_outside_the_sequence_is_refused() -> None:
    from cudagym.baselines.llm_ppo.advantages import token_rewards

    with pytest.raises(ValueError, match="outside"):
        token_rewards(3, [3], [1.0])


def test_only_the_assistant_tokens_carry_loss(renderer: Any, policy: Any) -> None:
    from cudagym.baselines.llm_ppo.losses import policy_loss

    call = {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "SYSTEMTEXT"},
        {"role": "user", "content": "USERTEXT"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "TOOLOUTPUT"},
        {"role": "assistant", "content": "done"},
    ]
    trajectory = renderer.conversation(messages, reward=1.0)
    tokenizer = policy.tokenizer
    ids = trajectory.input_ids
    assert tokenizer.decode(ids).count("TOOLOUTPUT") == 1
    acted = tokenizer.decode([t for t, m in zip(ids, trajectory.action_mask, strict=True) if m])
    context = tokenizer.decode([t for t, m in zip(ids, trajectory.action_mask, strict=True) if not m])
    assert '"name": "compile"' in acted and "done<|im_end|>" in acted
    for text in ("TOOLOUTPUT", "SYSTEMTEXT", "USERTEXT", "<tool_response>"):
        assert text not in acted and text in context
    assert (
        trajectory.turn_rewards == [0.0, 1.0] and [ids[e] for e in trajectory.turn_ends] == [tokenizer.eos_token_id] * 2
    )
    # the gradient of the PPO loss reaches the masked-in tokens only
    mask = torch.tensor([trajectory.action_mask], dtype=torch.float32)
    logprobs = torch.zeros(mask.shape, requires_grad=True)
    loss, _ = policy_loss(logprobs, torch.zeros_like(mask), torch.ones_like(mask), mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert torch.all(logprobs.grad[mask == 0] == 0) and torch.all(logprobs.grad[mask == 1] != 0)


def test_a_rollout_trains_on_the_replies_and_not_on_the_answers(
    renderer: Any, policy: Any, fast_config: EvalConfig
) -> None:
    from cudagym.baselines.llm_ppo import PPOSettings
    from cudagym.baselines.llm_ppo.rollout import collect, make_env_factory

    env = make_env_factory(backend="cpu", eval_config=fast_config)()
    try:
        (trajectory,) = collect(policy, renderer, [env], [RELU], PPOSettings(max_new_tokens=8), max_turns=2)
    finally:
        env.close()
    tokenizer, ids, mask = policy.tokenizer, trajectory.input_ids, trajectory.action_mask
    assert len(trajectory.turn_ends) == 2 and trajectory.turn_rewards == [0.0, 0.0]  # no submit: no reward
    assert 2 <= sum(mask) <= 16 and all(mask[e] == 1 for e in trajectory.turn_ends)
    first_reply = ids[mask.index(1) : trajectory.turn_ends[0] + 1]
    assert all(mask[mask.index(1) : trajectory.turn_ends[0] + 1])  # a reply is one run of policy tokens
    assert len(first_reply) <= 8
    # the environment's answer to the first reply is in the sequence, as context only
    answer = trajectory.messages[3]["content"]
    assert trajectory.messages[3]["role"] in ("user", "tool") and len(answer) > 20
    context = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if not m])
    acted = tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert answer[:40] in context and answer[:40] not in acted
    assert ids[: len(renderer.prompt_ids(trajectory.messages[:2]))] == renderer.prompt_ids(trajectory.messages[:2])


def test_the_policy_loss_clips_asymmetrically() -> None:
    from cudagym.baselines.llm_ppo.losses import policy_loss

    mask, advantages = torch.ones(1, 2), torch.ones(1, 2)
    old = torch.zeros(1, 2)
    # ratios 1.25 (inside 1 + 0.28) and 1.35 (outside): a positive advantage stops pushing only the second
    logprobs = torch.log(torch.tensor([[1.25, 1.35]])).requires_grad_()
    loss, clipped = policy_loss(logprobs, old, advantages, mask, clip_low=0.2, clip_high=0.28)
    loss.backward()
    assert clipped.item() == pytest.approx(0.5)
    assert logprobs.grad[0, 0] < 0 and logprobs.grad[0, 1] == 0


def test_kl_is_zero_for_identical_policies_and_positive_after_an_update(renderer: Any, policy: Any) -> None:
    import copy

    from cudagym.baselines.llm_ppo.losses import kl_to_reference, masked_mean, sft_loss
    from cudagym.baselines.llm_ppo.policy import token_logprobs

    actor = copy.deepcopy(policy.actor)
    probe = dataclasses.replace(policy, actor=actor)
    probe.freeze_reference()
    messages = [{"role": "user", "content": "make relu fast"}, {"role": "assistant", "content": "ok"}]
    trajectory = renderer.conversation(messages, reward=1.0)
    ids = torch.tensor([trajectory.input_ids])
    attention, mask = torch.ones_like(ids), torch.tensor([trajectory.action_mask])

    def kl() -> float:
        with torch.no_grad():
            ours, theirs = token_logprobs(actor, ids, attention), token_logprobs(probe.reference, ids, attention)
        return masked_mean(kl_to_reference(ours, theirs), mask).item()

    assert kl() == 0.0
    optimiser = torch.optim.AdamW(actor.parameters(), lr=1e-2)
    sft_loss(token_logprobs(actor, ids, attention), mask).backward()
    optimiser.step()
    assert kl() > 1e-6
    assert all(not p.requires_grad for p in probe.reference.parameters())


def test_settings_and_specs_refuse_bad_values(tmp_path: Path) -> None:
    from cudagym.baselines.llm_ppo import PPOSettings, RecipeSpec, load_policy

    with pytest.raises(ValueError, match="clip_low"):
        PPOSettings(clip_low=1.5)
    with pytest.raises(ValueError, match="sft_lr"):
        PPOSettings(sft_lr=0.0)
    with pytest.raises(ValueError, match="envs"):
        RecipeSpec(out=tmp_path, envs=0)
    with pytest.raises(FileNotFoundError, match="not a checkpoint"):
        load_policy("tiny", init=tmp_path)


# -- the four stages, end to end -----------------------------------------------------------------------------------


def _saved(folder: Path, part: str) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(str(folder / part / "model.safetensors"))


def test_all_four_stages_run_and_change_what_they_train(run: Run) -> None:
    from cudagym.baselines.llm_ppo import Stage

    report = run.report
    assert [r.stage for r in report.results] == list(Stage)
    single, rft, value, agentic = (_saved(r.checkpoint, "actor") for r in report.results)
    initial = {k: v for k, v in run.initial_actor.items() if k in single}
    assert _changed(initial, single)  # single-turn PPO moved the actor
    assert _changed(single, rft)  # so did rejection fine-tuning
    assert not _changed(rft, value)  # value pretraining trains the critic alone
    assert _changed(value, agentic)
    critics = [_saved(r.checkpoint, "critic") for r in report.results]
    assert _changed(critics[1], critics[2])  # value pretraining moved the critic
    assert not _changed(critics[0], critics[1])  # RFT did not


def test_value_pretraining_lowers_its_loss(run: Run) -> None:
    from cudagym.baselines.llm_ppo import Stage

    losses = [step["value_loss"] for step in run.report.result(Stage.VALUE).steps]
    assert len(losses) == 2 and losses[-1] < losses[0]


def test_rollouts_mask_everything_but_the_policys_replies(run: Run) -> None:
    from cudagym.baselines.llm_ppo import Stage

    for stage, turns in ((Stage.SINGLE_TURN, 1), (Stage.AGENTIC, 2)):
        result = run.report.result(stage)
        (step,) = result.steps
        assert step["tokens"] > 0 and step["kl"] >= 0.0 and result.mean_reward is not None
        lines = [json.loads(x) for x in result.files["rollouts"].read_text().splitlines()]
        assert len(lines) == 2 and all(line["metadata"]["task_id"] == RELU for line in lines)
        assert all(1 <= line["metadata"]["turns"] <= turns for line in lines)
        roles = [m["role"] for m in lines[0]["messages"]]
        assert (
            roles[:3] == ["system", "user", "assistant"] and roles.count("assistant") == lines[0]["metadata"]["turns"]
        )


def test_the_run_writes_its_artefacts(run: Run) -> None:
    files = run.report.files
    for name in ("curve_csv", "curve_json", "curve_png", "summary", "tensorboard"):
        assert files[name].exists(), name
    rows = json.loads(files["curve_json"].read_text())
    assert [r["stage"] for r in rows] == ["single-turn", "rft", "value", "value", "agentic"]
    header = files["curve_csv"].read_text().splitlines()[0]
    assert header.startswith("stage,step,mean_reward")
    summary = json.loads(files["summary"].read_text())
    assert [s["stage"] for s in summary["stages"]] == ["single-turn", "rft", "value", "agentic"]
    assert (run.out / "scripted_rft.jsonl").read_text().count("\n") == 1  # the scripted episode passed the filter
    for result in run.report.results:
        assert (result.checkpoint / "actor" / "config.json").exists() and (result.checkpoint / "critic").is_dir()


def test_the_command_line_runs_a_stage_from_a_checkpoint(run: Run, tmp_path: Path, capsys: Any) -> None:
    from cudagym.baselines.llm_ppo import Stage
    from cudagym.cli import main

    checkpoint = run.report.result(Stage.RFT).checkpoint
    rollouts = run.report.result(Stage.SINGLE_TURN).files["rollouts"]
    argv = ["baselines", "llm-ppo", "--stage", "value", "--init", str(checkpoint), "--value-data", str(rollouts)]
    argv += ["--value-epochs", "1", "--minibatch", "2", "--device", "cpu", "--out", str(tmp_path)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "value" in printed and str(tmp_path / "value") in printed
    assert (tmp_path / "value" / "critic" / "config.json").exists()
    assert json.loads((tmp_path / "curve.json").read_text())[0]["stage"] == "value"


def test_a_run_cut_short_keeps_its_curve_and_plot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tables are rewritten at every row and the plot once it is ``DRAW_EVERY_S`` old, without ``write`` (a run
    killed by its time limit never reaches it)."""
    pytest.importorskip("matplotlib")
    from cudagym.baselines.llm_ppo import artefacts

    log = artefacts.RunLog(tmp_path)
    log.record("rft", {"step": 0.0, "sft_loss": 7.0})
    assert (tmp_path / "curve.csv").exists() and not (tmp_path / "curve.png").exists()
    monkeypatch.setattr(artefacts, "DRAW_EVERY_S", 0.0)
    log.record("rft", {"step": 1.0, "sft_loss": 6.0})
    assert (tmp_path / "curve.png").stat().st_size > 0
    assert [row["sft_loss"] for row in json.loads((tmp_path / "curve.json").read_text())] == [7.0, 6.0]
    log.close()


def test_rft_learns_at_its_own_rate_where_one_is_given(tmp_path: Path) -> None:
    """``sft_lr`` is RFT's learning rate, ``actor_lr`` only where it is None: the same data and start give the same
    actor whichever of the two carries the rate."""
    from cudagym.baselines.llm_ppo import PPOSettings, load_policy
    from cudagym.baselines.llm_ppo.artefacts import RunLog
    from cudagym.baselines.llm_ppo.render import ChatRenderer
    from cudagym.baselines.llm_ppo.stages import rejection_finetune
    from cudagym.baselines.llm_ppo.tiny import tiny_corpus
    from cudagym.tasks import load
    from cudagym.tools import tool_schemas

    messages = [{"role": "user", "content": "write relu"}, {"role": "assistant", "content": "done"}]
    data = tmp_path / "rft.jsonl"
    data.write_text(json.dumps({"messages": messages, "metadata": {"reward": 1.0, "task_id": RELU}}) + "\n")
    corpus = tiny_corpus(load("builtin", ids=[RELU]))
    actors = {}
    for name, settings in {
        "actor_lr": PPOSettings(minibatch=1, sft_epochs=2, actor_lr=1e-2),
        "sft_lr": PPOSettings(minibatch=1, sft_epochs=2, actor_lr=1e-9, sft_lr=1e-2),
        "slow": PPOSettings(minibatch=1, sft_epochs=2, actor_lr=1e-2, sft_lr=1e-9),
    }.items():
        torch.manual_seed(0)
        policy = load_policy("tiny", corpus=corpus, device="cpu")
        renderer = ChatRenderer(policy.tokenizer, tool_schemas("openai"))
        start = {k: v.detach().clone() for k, v in policy.actor.named_parameters()}
        rejection_finetune(policy, renderer, [data], settings, out=tmp_path / name, log=RunLog(tmp_path / name))
        actors[name] = {k: v.detach() for k, v in policy.actor.named_parameters()}
        moved = max((actors[name][k] - start[k]).abs().max().item() for k in start)
        assert (moved < 1e-6) == (name == "slow"), (name, moved)
    assert all(torch.allclose(actors["actor_lr"][k], actors["sft_lr"][k]) for k in actors["actor_lr"])


@pytest.mark.skipif(importlib.util.find_spec("peft") is None, reason="needs peft (LoRA)")
def test_lora_trains_only_the_adapters_and_saves_a_plain_merged_model(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    from cudagym.baselines.llm_ppo import PPOSettings, load_policy
    from cudagym.baselines.llm_ppo.artefacts import RunLog
    from cudagym.baselines.llm_ppo.render import ChatRenderer
    from cudagym.baselines.llm_ppo.stages import rejection_finetune
    from cudagym.baselines.llm_ppo.tiny import tiny_corpus
    from cudagym.tasks import load
    from cudagym.tools import tool_schemas

    policy = load_policy("tiny", corpus=tiny_corpus(load("builtin", ids=[RELU])), device="cpu", lora_rank=4)
    named = dict(policy.actor.named_parameters())
    trained = {name for name, p in named.items() if p.requires_grad}
    assert trained and all("lora_" in name for name in trained)  # the base weights are frozen
    before = {name: p.detach().clone() for name, p in named.items()}
    call = {"id": "c1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "write relu"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "compiled"},
        {"role": "assistant", "content": "done"},
    ]
    data = tmp_path / "rft.jsonl"
    data.write_text(json.dumps({"messages": messages, "metadata": {"reward": 1.0, "task_id": RELU}}) + "\n")
    renderer = ChatRenderer(policy.tokenizer, tool_schemas("openai"))
    settings = PPOSettings(minibatch=1, sft_epochs=2, actor_lr=1e-2)
    result = rejection_finetune(policy, renderer, [data], settings, out=tmp_path, log=RunLog(tmp_path / "log"))
    after = dict(policy.actor.named_parameters())
    assert any(not torch.equal(before[name], after[name]) for name in trained)
    assert all(torch.equal(before[name], after[name]) for name in named if name not in trained)
    # the checkpoint is the merged model, loadable without peft: its outputs are the adapted actor's
    saved = AutoModelForCausalLM.from_pretrained(result.checkpoint / "actor")
    ids = torch.tensor([policy.tokenizer("write relu")["input_ids"]])
    policy.actor.eval()
    with torch.no_grad():
        expected, got = policy.actor(input_ids=ids).logits, saved(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-4)


@pytest.mark.gpu
def test_the_recipe_on_the_gpu(tmp_path: Path, fast_config: EvalConfig) -> None:
    """All four stages with the tiny model on the GPU and the cuda backend (the H200 run's path, at its smallest)."""
    from cudagym.baselines.llm_ppo import PPOSettings, RecipeSpec, Stage, run_recipe

    spec = RecipeSpec(
        out=tmp_path,
        task_ids=(RELU,),
        backend="cuda",
        eval_config=fast_config,
        envs=2,
        single_turn_steps=1,
        agentic_steps=1,
        max_turns=2,
        settings=PPOSettings(max_new_tokens=16, minibatch=2, sft_epochs=1, value_epochs=2),
        device="cuda",
        dtype="bfloat16",
    )
    report = run_recipe(spec)
    assert [r.stage for r in report.results] == list(Stage)
    assert report.result(Stage.VALUE).steps[-1]["value_loss"] < report.result(Stage.VALUE).steps[0]["value_loss"]


def test_the_command_line_passes_sizes_to_the_task_loader_and_refuses_a_malformed_one() -> None:
    import argparse

    from cudagym.baselines.llm_ppo.cli import _configure, spec_from_args

    parser = argparse.ArgumentParser()
    _configure(parser)
    spec = spec_from_args(parser.parse_args(["--task", "builtin/relu", "--sizes", "N=4096", "--sizes", "dim=(2, 3)"]))
    assert spec.task_options == {"sizes": {"N": 4096, "dim": (2, 3)}}
    assert spec_from_args(parser.parse_args([])).task_options == {}
    with pytest.raises(SystemExit, match="NAME=VALUE"):
        spec_from_args(parser.parse_args(["--sizes", "N4096"]))
