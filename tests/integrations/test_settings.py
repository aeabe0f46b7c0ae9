"""Environment settings from a trainer's config file (plain values and nested mappings), an episode's figures and the
task a dataset row names."""

from __future__ import annotations

import pytest

from cudagym.evaluator import EvalConfig
from cudagym.harness.timing import TimingConfig
from cudagym.integrations.settings import dataclass_from_mapping, env_kwargs, episode_metrics, task_id_from
from cudagym.workspace import WorkspaceLimits


def test_nested_mappings_become_the_settings_dataclasses() -> None:
    config = {
        "backend": "cpu",
        "max_turns": 30,
        "eval_config": {
            "num_checks": 2,
            "input_kinds": ["task"],
            "timing": {"min_reps": 5},
            "policy": {"allow": ["x"]},
        },
        "workspace_limits": {"max_files": 8},
    }
    kwargs = env_kwargs(config)
    assert kwargs["backend"] == "cpu" and kwargs["max_turns"] == 30
    evaluation = kwargs["eval_config"]
    assert isinstance(evaluation, EvalConfig) and evaluation.num_checks == 2 and evaluation.input_kinds == ("task",)
    assert evaluation.timing == TimingConfig(min_reps=5) and evaluation.policy.allow == frozenset({"x"})
    assert kwargs["workspace_limits"] == WorkspaceLimits(max_files=8)
    ready = EvalConfig(num_checks=4)
    assert env_kwargs({"eval_config": ready})["eval_config"] is ready  # a dataclass already made passes through
    assert env_kwargs(None) == {}


def test_an_unknown_option_names_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"eval_config.timing: unknown option\(s\) \['reps'\]; TimingConfig takes: "):
        env_kwargs({"eval_config": {"timing": {"reps": 3}}})
    with pytest.raises(TypeError, match=r"WorkspaceLimits: unknown option\(s\) \['files'\]"):
        dataclass_from_mapping(WorkspaceLimits, {"files": 3})


def test_episode_metrics_keep_what_was_measured() -> None:
    assert episode_metrics({"tool": "compile", "status": "ok"}, 3) == {"turns": 3, "submitted": False}
    submit = {"tier": 2, "compiled": True, "correct": True, "speedup_eager": 1.3, "speedup_compile": None}
    assert episode_metrics(submit, 7) == {
        "turns": 7,
        "submitted": True,
        "tier": 2,
        "compiled": True,
        "correct": True,
        "speedup_eager": 1.3,
    }


def test_the_task_a_row_names() -> None:
    assert task_id_from({"task_id": "builtin/relu"}) == "builtin/relu"
    assert task_id_from({"extra_info": {"task_id": "builtin/gelu"}}) == "builtin/gelu"
    assert task_id_from({"task_id": "", "extra_info": None}) is None
