"""Observation sizes: what the agent reads, in bytes and lines, per kind of observation, over a scripted and a random
episode.

    python benchmarks/observation_sizes.py --backend cpu --random-steps 60 --seed 0

The *scripted* episode (on ``--task``, builtin/relu by default) meets every kind of observation on purpose: the
instructions, file tools, a compile error, a wrong result, a native crash (an out-of-bounds write: a segfault on cpu, an
illegal memory access on cuda), an endless loop (a timeout after ``--verify-timeout`` s), a Python error, a malformed
call, a correct verify, a profile and a submit. The *random* episode (seeded by ``--seed``) makes random tool calls with
random or garbage arguments: writes and edits of mutated solution files or random text, paths in and outside the
writable set, reads with odd offsets, malformed actions, and the evaluation tools; a submit starts a new episode. It
stops after ``--random-steps`` calls or ``--max-seconds``. Prints one table row per (episode, kind): how many
observations, median and largest bytes and lines; ``--json`` writes every observation's size.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import platform
import random
import statistics
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudagym.baselines import tool_call
from cudagym.baselines.scripted import solution_files
from cudagym.envs import CudaKernelEnv
from cudagym.evaluator import EvalConfig

# the scripted episode's edits of the ReLU solution, per backend: (what it shows, file, text replaced, replacement)
RELU_EDITS: dict[str, dict[str, tuple[str, str, str]]] = {
    "cpu": {
        "compile error": ("kernels/relu.cpp", "float v = x[i];", "float v = x[i] * undefined_scale"),
        "wrong result": ("kernels/relu.cpp", "y[i] = v > 0.0f ? v : 0.0f;", "y[i] = v;"),
        "crash": ("kernels/relu.cpp", "y[i] = v > 0.0f ? v : 0.0f;", "y[i + (int64_t(1) << 40)] = v;"),
        "endless loop": (
            "kernels/relu.cpp",
            "float v = x[i];",
            "float v = x[i];\n    for (volatile int64_t spin = 0; spin >= 0; spin = spin + 0) {}",
        ),
    },
    "cuda": {
        "compile error": ("kernels/relu.cu", "return fmaxf(v, 0.0f);", "return fmaxf(v, 0.0f) * undefined_scale"),
        "wrong result": ("kernels/relu.cu", "return fmaxf(v, 0.0f);", "return v;"),
        "crash": ("kernels/relu.cu", "__stcs(y + i, a);", "__stcs(y + i + (int64_t(1) << 36), a);"),
        "endless loop": (
            "kernels/relu.cu",
            "float4 v[kUnroll];",
            "float4 v[kUnroll];\n  for (volatile int spin = 0; spin >= 0; spin = spin + 0) {}",
        ),
    },
}
# calls the extension (as the static checks require), then fails in torch: a Python error with torch's frames
RAISES = (
    "import cuda_extension\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n"
    "        return cuda_extension.relu_forward(x.contiguous()).view(-1, 7, 3)\n"
)


@dataclasses.dataclass
class Observed:
    """One observation's size and kind."""

    episode: str
    kind: str  # "reset", or "<tool>/<status>" ("parse/invalid_call" for a malformed action)
    bytes: int
    lines: int


class Recorder:
    """Steps an env and records every observation's size."""

    def __init__(self, env: CudaKernelEnv, episode: str) -> None:
        self.env = env
        self.episode = episode
        self.seen: list[Observed] = []
        self.done = False

    def _record(self, kind: str, obs: str) -> None:
        self.seen.append(Observed(self.episode, kind, len(obs.encode()), obs.count("\n") + 1))

    def reset(self, task_id: str) -> None:
        obs, _ = self.env.reset(options={"task_id": task_id})
        self._record("reset", obs)
        self.done = False

    def step(self, action: str) -> dict[str, Any]:
        obs, _, terminated, truncated, info = self.env.step(action)
        self._record(f"{info.get('tool') or 'parse'}/{info.get('status', 'ended')}", obs)
        self.done = terminated or truncated
        return info


def edited(files: dict[str, str], path: str, old: str, new: str) -> dict[str, str]:
    if old not in files.get(path, ""):
        raise SystemExit(f"the solution's {path} no longer holds {old!r}: update RELU_EDITS")
    return {**files, path: files[path].replace(old, new, 1)}


def scripted_episode(env: CudaKernelEnv, task_id: str) -> list[Observed]:
    """Every kind of observation once or more (see the module docstring)."""
    rec = Recorder(env, "scripted")
    rec.reset(task_id)
    assert env.task is not None
    solution = solution_files(env.task, env.backend.name)
    edits = RELU_EDITS[env.backend.name] if task_id == "builtin/relu" else {}

    def write(files: dict[str, str]) -> None:
        for path, content in files.items():
            rec.step(tool_call("write_file", path=path, content=content))

    rec.step(tool_call("list_files"))
    rec.step(tool_call("read_file", path="model.py"))
    rec.step(tool_call("write_file", path="../outside.cpp", content="int x;"))
    rec.step('{"name": "compile", "arguments": ')  # malformed: the JSON is cut short
    write(solution)
    for what in ("compile error", "wrong result", "crash", "endless loop"):
        if what in edits:
            write(edited(solution, *edits[what]))
            rec.step(tool_call("compile" if what == "compile error" else "verify"))
    write({**solution, "model_new.py": RAISES})
    rec.step(tool_call("verify"))
    write(solution)
    rec.step(tool_call("compile"))
    rec.step(tool_call("verify"))
    rec.step(tool_call("profile"))
    rec.step(tool_call("submit"))
    return rec.seen


def _random_text(rng: random.Random, longest: int) -> str:
    alphabet = string.printable + "\u00e9\u2192\U0001f600\x00\x1b"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))


def _mutated(rng: random.Random, text: str) -> str:
    """``text`` with one random change: a line dropped, a character replaced, a token added, or cut short."""
    if not text:
        return text
    lines = text.splitlines()
    choice = rng.randrange(4)
    if choice == 0 and len(lines) > 1:
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    at = rng.randrange(len(text))
    if choice == 1:
        return text[:at] + rng.choice(string.printable) + text[at + 1 :]
    if choice == 2:
        return text[:at] + rng.choice(["}", "{", ";", "@@", "int", "*(float4*)", "return"]) + text[at:]
    return text[:at]


class RandomAgent:
    """Random tool calls with random or garbage arguments (see the module docstring), from one seeded generator."""

    def __init__(self, rng: random.Random, solution: dict[str, str]) -> None:
        self.rng = rng
        self.solution = solution
        self.written: dict[str, str] = {}
        paths = [*solution, "model.py", "binding.cpp", "kernels/extra.h", "kernels/new.cu", "kernels/new.cpp"]
        self.paths = [*paths, "../escape.cpp", "/etc/passwd", "kernels/../../x.cpp", "notes.txt", "kernels/a b.cpp"]

    def _path(self) -> str:
        return self.rng.choice(self.paths) if self.rng.random() < 0.9 else _random_text(self.rng, 40)

    def _content(self, path: str) -> str:
        roll = self.rng.random()
        if path in self.solution and roll < 0.5:
            return _mutated(self.rng, self.solution[path]) if roll < 0.35 else self.solution[path]
        return _random_text(self.rng, 2000)

    def _garbage(self) -> str:
        rng = self.rng
        return rng.choice(
            [
                _random_text(rng, 300),
                '{"name": "write_file", "arguments": {"path": "kernels/a.cpp"}}',  # a missing argument
                '{"name": "launch_rockets", "arguments": {}}',  # an unknown tool
                '<tool_call>{"name": "read_file", "arguments": {"path": 5}}</tool_call>',  # a wrong type
                tool_call("list_files") + tool_call("compile"),  # two calls at once
                '<tool_call>{"name": "compile", "arguments": {}}',  # an unclosed tag
                "{" * rng.randint(1, 50),
            ]
        )

    def action(self) -> str:
        rng = self.rng
        tool = rng.choices(
            ["write_file", "edit_file", "read_file", "list_files", "compile", "verify", "profile", "submit", "garbage"],
            weights=[4, 3, 3, 1, 3, 1.5, 0.5, 0.3, 3],
        )[0]
        if tool == "garbage":
            return self._garbage()
        if tool == "write_file":
            path = self._path()
            content = self._content(path)
            self.written[path] = content
            return tool_call(tool, path=path, content=content)
        if tool == "edit_file":
            path = rng.choice(list(self.written) or self.paths)
            text = self.written.get(path, "")
            start = rng.randrange(len(text)) if text else 0
            old = text[start : start + rng.randint(1, 40)] if text and rng.random() < 0.7 else _random_text(rng, 20)
            return tool_call(tool, path=path, old_string=old, new_string=_random_text(rng, 60))
        if tool == "read_file":
            args: dict[str, Any] = {"path": self._path()}
            if rng.random() < 0.4:
                args.update(offset=rng.randint(-5, 400), limit=rng.choice([0, 1, 50, 10_000, -1]))
            return tool_call(tool, **args)
        return tool_call(tool)


def random_episode(env: CudaKernelEnv, task_id: str, steps: int, seed: int, max_seconds: float) -> list[Observed]:
    rng = random.Random(seed)
    rec = Recorder(env, "random")
    rec.reset(task_id)
    assert env.task is not None
    agent = RandomAgent(rng, solution_files(env.task, env.backend.name))
    deadline = time.monotonic() + max_seconds
    for _ in range(steps):
        if time.monotonic() > deadline:
            break
        if rec.done:
            rec.reset(task_id)
        rec.step(agent.action())
    return rec.seen


def table(observed: list[Observed]) -> str:
    """One row per (episode, kind): count, median and largest bytes and lines; then each episode's total."""
    rows = [
        "| episode | observation | n | median bytes | max bytes | median lines | max lines |",
        "|---|---|---|---|---|---|---|",
    ]
    groups: dict[tuple[str, str], list[Observed]] = {}
    for o in observed:
        groups.setdefault((o.episode, o.kind), []).append(o)
        groups.setdefault((o.episode, "(all)"), []).append(o)
    order: Callable[[tuple[str, str]], tuple[str, bool, str]] = lambda key: (key[0], key[1] == "(all)", key[1])  # noqa: E731
    for (episode, kind), group in sorted(groups.items(), key=lambda item: order(item[0])):
        sizes = [o.bytes for o in group]
        lines = [o.lines for o in group]
        rows.append(
            f"| {episode} | {kind} | {len(group)} | {statistics.median(sizes):.0f} | {max(sizes)} | "
            f"{statistics.median(lines):.0f} | {max(lines)} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--task", default="builtin/relu", help="the task of both episodes (its solution is used)")
    parser.add_argument("--episodes", default="scripted,random", help="which episodes to play, comma-separated")
    parser.add_argument("--random-steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-seconds", type=float, default=90.0, help="the random episode's time budget")
    parser.add_argument("--verify-timeout", type=float, default=30.0, help="what the endless loop waits for")
    parser.add_argument("--cache-dir", help="compile and baseline cache (default: ~/.cache/cudagym)")
    parser.add_argument("--json", help="write every observation's size here")
    args = parser.parse_args()
    config = EvalConfig(num_checks=3, verify_timeout=args.verify_timeout)
    env = CudaKernelEnv(backend=args.backend, eval_config=config, cache_dir=args.cache_dir, ids=[args.task])
    episodes = set(args.episodes.split(","))
    start = time.monotonic()
    observed: list[Observed] = []
    try:
        if "scripted" in episodes:
            observed += scripted_episode(env, args.task)
        if "random" in episodes:
            observed += random_episode(env, args.task, args.random_steps, args.seed, args.max_seconds)
    finally:
        env.close()
    header = (
        f"{datetime.date.today()} | backend {env.backend.name} ({env.backend.device_name}) | {platform.node()} | "
        f"task {args.task} | seed {args.seed} | {time.monotonic() - start:.0f} s"
    )
    print(header)
    print(table(observed))
    if args.json:
        Path(args.json).write_text(
            json.dumps({"run": header, "observations": [dataclasses.asdict(o) for o in observed]})
        )


if __name__ == "__main__":
    main()
