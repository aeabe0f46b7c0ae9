"""Rejection fine-tuning export: the selection rules and the chat format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cudagym.baselines import tool_call
from cudagym.baselines.rft import RFTFilter, export_rft, trajectory_messages
from cudagym.evaluation import Step, Trajectory
from cudagym.tools import tool_schemas

FIRST = "# Task: demo\nrules\n\n## model.py\nclass Model: ..."


def trajectory(task_id: str, reward: float, *actions: str) -> Trajectory:
    steps = tuple(Step(a, f"obs {i}", 0.0) for i, a in enumerate(actions, 1))
    return Trajectory(task_id, "llm", "cpu", FIRST, steps, reward, int(reward) if reward > 0 else -1, "submitted")


GOOD = trajectory(
    "good",
    2.0,
    "I will read it.\n" + tool_call("read_file", path="model.py") + "\nthen write.",
    json.dumps({"id": "x9", "type": "function", "function": {"name": "write_file", "arguments": json.dumps(
        {"path": "model_new.py", "content": "pass"})}}),
    tool_call("submit"),
)  # fmt: skip
RECORDS = [
    GOOD,
    trajectory("failed", -1.0, tool_call("submit")),
    trajectory("unsubmitted", 0.0, tool_call("compile")),
    trajectory("hallucinated", 1.0, '{"name": "bash", "arguments": {"command": "ls"}}', tool_call("submit")),
    trajectory("loop", 1.0, *[tool_call("compile")] * 4, tool_call("submit")),
]


def write(path: Path) -> Path:
    path.write_text("".join(json.dumps(t.to_json()) + "\n" for t in RECORDS))
    return path


def test_export_keeps_positive_valid_loop_free_episodes(tmp_path: Path) -> None:
    out = tmp_path / "out" / "rft.jsonl"
    done = export_rft(write(tmp_path / "traj.jsonl"), out)
    assert (done.read, done.kept, done.low_reward, done.invalid, done.loops) == (5, 1, 2, 1, 1)
    (line,) = [json.loads(x) for x in out.read_text().splitlines()]
    assert line["metadata"] == {"task_id": "good", "reward": 2.0, "tier": 2, "agent": "llm", "backend": "cpu",
                                "turns": 3}  # fmt: skip
    assert line["tools"] == tool_schemas("openai")
    m = line["messages"]
    assert [x["role"] for x in m] == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "tool"]
    assert m[0]["content"] == "# Task: demo\nrules" and m[1]["content"] == "## model.py\nclass Model: ..."
    assert m[2]["content"] == "I will read it.\n\nthen write."
    assert m[2]["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "model.py"}'}}
    ]  # only the arguments the agent gave, not the defaults (offset, limit)
    assert m[3] == {"role": "tool", "tool_call_id": "call_1", "content": "obs 1"}
    assert m[4]["content"] is None and m[4]["tool_calls"][0]["function"]["name"] == "write_file"
    assert json.loads(m[4]["tool_calls"][0]["function"]["arguments"]) == {"path": "model_new.py", "content": "pass"}
    assert m[6]["tool_calls"][0]["function"] == {"name": "submit", "arguments": "{}"}


def test_looser_rules(tmp_path: Path) -> None:
    rules = RFTFilter(min_reward=-2.0, drop_invalid=False, max_repeats=None, include_tools=False)
    done = export_rft(write(tmp_path / "traj.jsonl"), tmp_path / "rft.jsonl", rules)
    assert (done.kept, done.low_reward, done.invalid, done.loops) == (5, 0, 0, 0)
    lines = [json.loads(x) for x in (tmp_path / "rft.jsonl").read_text().splitlines()]
    assert all("tools" not in line for line in lines)
    hallucinated = next(line for line in lines if line["metadata"]["task_id"] == "hallucinated")["messages"]
    assert hallucinated[2] == {"role": "assistant", "content": '{"name": "bash", "arguments": {"command": "ls"}}'}
    assert hallucinated[3] == {"role": "user", "content": "obs 1"}
    assert trajectory_messages(RECORDS[3]) is None


def test_the_hf_format_renders_through_a_template_that_iterates_arguments(tmp_path: Path) -> None:
    """``--format hf``: the same episode with argument objects and no null content (``cudagym.wrappers.to_hf``),
    through the CLI; a template that iterates the arguments renders it (the OpenAI form fails there)."""
    import jinja2
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    from cudagym.eval_cli import main

    trajectories = write(tmp_path / "traj.jsonl")
    assert main(["rft-export", str(trajectories), str(tmp_path / "openai.jsonl")]) == 0
    assert main(["rft-export", str(trajectories), str(tmp_path / "hf.jsonl"), "--format", "hf"]) == 0
    openai = json.loads((tmp_path / "openai.jsonl").read_text())
    hf = json.loads((tmp_path / "hf.jsonl").read_text())
    m = hf["messages"]
    assert m[4]["content"] == "" and m[4]["tool_calls"][0]["function"]["arguments"] == {
        "path": "model_new.py",
        "content": "pass",
    }
    assert m[2]["tool_calls"][0]["function"]["arguments"] == {"path": "model.py"}
    assert m[6]["tool_calls"][0]["function"]["arguments"] == {}
    assert hf["tools"] == openai["tools"] and hf["metadata"] == openai["metadata"]
    template = ImmutableSandboxedEnvironment().from_string(
        "{% for m in messages %}{% for c in m.tool_calls or [] %}"
        "{{ c.function.name }}({% for k, v in c.function.arguments.items() %}{{ k }}={{ v }} {% endfor %})"
        "{% endfor %}{% endfor %}"
    )
    assert template.render(messages=m) == "read_file(path=model.py )write_file(path=model_new.py content=pass )submit()"
    with pytest.raises(jinja2.exceptions.UndefinedError):  # a JSON string has no items()
        template.render(messages=openai["messages"])
    assert main(["rft-export", str(trajectories), str(tmp_path / "s.jsonl"), "--format", "hf", "--arguments", "string",
                 "--null-content", "(calls)"]) == 0  # fmt: skip
    strings = json.loads((tmp_path / "s.jsonl").read_text())["messages"]
    assert strings[4]["content"] == "(calls)" and strings[2]["tool_calls"] == openai["messages"][2]["tool_calls"]
