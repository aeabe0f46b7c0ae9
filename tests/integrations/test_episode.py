"""cudagym.integrations.episode: named tool calls as steps, and the episode's account the plugs score from."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudagym_testing import RELU

from cudagym.evaluator import EvalConfig
from cudagym.integrations.episode import EpisodeAccount, ToolEpisode
from cudagym.integrations.trl import CudaKernelToolEnv


def test_calls_are_steps_and_the_account_sums_them(fast_config: EvalConfig) -> None:
    episode = ToolEpisode(backend="cpu", eval_config=fast_config, max_turns=3)
    try:
        with pytest.raises(RuntimeError, match="reset"):
            episode.call("list_files", {})
        assert episode.reset(RELU).startswith("# Task: ReLU")
        assert episode.account == EpisodeAccount(task_id=RELU)
        assert "model.py" in episode.call("list_files", {})
        assert "INVALID CALL" in episode.call("read_file", {"path": "model.py", "lines": 2})  # a turn, answered
        assert episode.account.turns == 2 and not episode.account.ended
        last = episode.call("read_file", {"path": "model.py"})
        assert "turn budget (3) is spent" in last
        account = episode.account
        assert (account.turns, account.ended, account.submitted, account.episode_return) == (3, True, False, 0.0)
        assert account.reward_terms == {"truncated": 0.0}
        assert account.metrics() == {"turns": 3.0, "submitted": 0.0, "reward_truncated": 0.0}
        episode.call("submit", {})  # after the end: answered, not counted
        assert episode.account.turns == 3 and not episode.account.submitted
        workspace = episode.env.workspace.path
    finally:
        episode.close()
    assert episode.env is None and not workspace.exists()


def test_a_submit_the_harness_could_not_evaluate_is_kept_as_such(tmp_path: Path, fast_config: EvalConfig) -> None:
    # an evaluation service that is not there: every evaluation is a harness failure, not the agent's
    episode = ToolEpisode(backend="cpu", eval_config=fast_config, service_socket=str(tmp_path / "none.sock"))
    try:
        episode.reset(RELU)
        episode.call("submit", {})
    finally:
        episode.close()
    account = episode.account
    assert account is not None and account.ended and account.submitted
    assert account.harness_error and "evaluation service" in account.harness_error
    assert account.episode_return == 0.0 and account.reward_terms == {"harness_error": 0.0}


def test_trl_leaves_an_unevaluated_rollout_out(tmp_path: Path, fast_config: EvalConfig) -> None:
    with CudaKernelToolEnv(backend="cpu", eval_config=fast_config, service_socket=str(tmp_path / "none.sock")) as env:
        env.reset(task_id=RELU)
        env.submit()
        assert env.account is not None and env.account.harness_error
        assert env.get_reward() is None  # TRL reads None as "no reward": the rollout gets no advantage
