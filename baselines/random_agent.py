"""The random agent: a seeded fuzzer of the environment's action interface.

Each turn it writes one action drawn from a mix of

* well-formed calls of a random tool with plausible or hostile arguments: paths inside and outside the
  writable set (``..``, absolute paths, the fixed files, odd names), short C++ and Python snippets that
  compile or not, crash, abort or raise;
* malformed calls: unknown tool names, bad JSON, missing, extra or mistyped arguments, unclosed tags,
  two calls at once, empty or non-ASCII text, OpenAI ``tool_calls`` entries with bad argument strings;
* now and then ``submit``, which ends the episode.

It is for testing that every action yields an observation and never an exception; its tiers mean
nothing. The same seed, task and episode count give the same actions.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from cudagym.tasks.task import Task
from cudagym.tools import tool_names

DEFAULT_TOOL_WEIGHTS: Mapping[str, float] = {
    "write_file": 4.0,
    "edit_file": 2.0,
    "read_file": 3.0,
    "list_files": 1.0,
    "compile": 1.5,
    "verify": 0.5,
    "profile": 0.3,
}
"""How often each tool is picked for a well-formed call (``submit`` has its own probability)."""

CHEAP_TOOL_WEIGHTS: Mapping[str, float] = {
    "write_file": 4.0,
    "edit_file": 2.0,
    "read_file": 3.0,
    "list_files": 1.0,
    "compile": 1.0,
}
"""Without ``verify`` and ``profile`` (which start evaluation processes): for quick fuzzing runs."""

PATHS: tuple[str, ...] = (
    "model.py",
    "model_new.py",
    "binding.cpp",
    "binding_registry.h",
    "INSTRUCTIONS.md",
    "kernels/k.cpp",
    "kernels/k.cu",
    "kernels/k.cuh",
    "kernels/k.h",
    "kernels/k_binding.cpp",
    "kernels/sub/dir/k.cpp",
    "kernels/../model.py",
    "kernels/../../escape.cpp",
    "../escape.cpp",
    "./model_new.py",
    "/etc/passwd",
    "/tmp/cudagym-fuzz.cpp",
    "~/k.cpp",
    "kernels/",
    "kernels",
    "",
    ".",
    "kernels/k.py",
    "kernels/k.so",
    "kernels/a b.cpp",
    "kernels/\u00e9t\u00e9.cpp",
    "kernels/nul\x00.cpp",
    "kernels/" + "a" * 300 + ".cpp",
    "KERNELS/k.cpp",
    "kernels\\k.cpp",
)

CPP_SNIPPETS: tuple[str, ...] = (
    "#include <cstdint>\n"
    "void k(const float* x, float* y, int64_t n) { for (int64_t i = 0; i < n; ++i) y[i] = x[i]; }\n",
    "void k( { syntax error\n",
    "#include <cstdint>\nint64_t twice(int64_t v) { return 2 * v; }\n",
    '#include "binding_registry.h"\n'
    "torch::Tensor ident(torch::Tensor x) { return x; }\n"
    'static void bind(pybind11::module_& m) { m.def("ident", &ident); }\n'
    "REGISTER_BINDING(ident, bind);\n",
    '#include "binding_registry.h"\nstatic void bind(pybind11::module_& m) {}\nREGISTER_BINDING(, bind);\n',
    "#include <cstdlib>\nstruct Boom { Boom() { std::abort(); } } boom;  // aborts when loaded\n",
    '#include "../model.py"\n',
    "#include </etc/passwd>\n",
    "#include <cuda_runtime.h>\n__global__ void k(float* y) { y[threadIdx.x] = 0.f; }\n",
    "int main() { return 0; }\n",
    "#error deliberate\n",
    "",
)

PY_SNIPPETS: tuple[str, ...] = (
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, *args):\n        raise ValueError('fuzz')\n",
    "import cuda_extension\nimport torch.nn as nn\nclass ModelNew(nn.Module):\n"
    "    def forward(self, x):\n        return cuda_extension.ident(x)\n",
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, *args):\n        return torch.zeros(1)\n",
    "class ModelNew:\n    pass\n",
    "import os\nos._exit(3)\n",
    "def broken(:\n",
    "",
)

HANG_SNIPPETS: tuple[str, ...] = (
    "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, *args):\n        while True:\n"
    "            pass\n",
)
"""Snippets that run until the stage's timeout (only with ``allow_hangs``: each costs a whole timeout)."""

NOISE: tuple[str, ...] = (
    "",
    "   \n\t",
    "I will now write the kernel.",
    "{",
    "[]",
    "null",
    "42",
    '"compile"',
    "{'name': 'compile', 'arguments': {}}",
    '{"name": "compile", "arguments": {},}',
    '{"name": "compile", "arguments": {}',
    "<tool_call>{}</tool_call>",
    '<tool_call>{"name": "compile", "arguments": {}}',
    "</tool_call>",
    "```json\n{}\n```",
    "\u00fcn\u00efc\u00f6d\u00e9 \u2603 \U0001f680",
    "\x00\x01\x02\x1b[31m",
)


class RandomAgent:
    """Random and malformed tool calls, seeded (see the module doc).

    Args:
        seed: the seed; an episode's actions depend on it, the task id and how many episodes of that task
            this agent has started.
        malformed: the probability that an action is malformed rather than a well-formed call.
        submit_probability: the probability that an action is ``submit``.
        tool_weights: relative weights of the tools for well-formed calls (``DEFAULT_TOOL_WEIGHTS``;
            ``CHEAP_TOOL_WEIGHTS`` leaves out the evaluation tools).
        allow_hangs: also write code that runs forever (each such verify costs the stage's timeout).
        max_actions: stop (``act`` returns None) after this many actions in an episode; None: never.
        paths: the pool of paths to draw from (default ``PATHS``).
    """

    name = "random"

    def __init__(
        self,
        seed: int = 0,
        *,
        malformed: float = 0.35,
        submit_probability: float = 0.02,
        tool_weights: Mapping[str, float] | None = None,
        allow_hangs: bool = False,
        max_actions: int | None = None,
        paths: Sequence[str] | None = None,
    ) -> None:
        if not 0.0 <= malformed <= 1.0 or not 0.0 <= submit_probability <= 1.0:
            raise ValueError("malformed and submit_probability must lie in [0, 1]")
        weights = dict(DEFAULT_TOOL_WEIGHTS if tool_weights is None else tool_weights)
        unknown = set(weights) - set(tool_names())
        if unknown or not any(w > 0 for w in weights.values()):
            raise ValueError(f"tool_weights needs positive weights for known tools; unknown: {sorted(unknown)}")
        self.seed = seed
        self.malformed = malformed
        self.submit_probability = submit_probability
        self.tool_weights = weights
        self.allow_hangs = allow_hangs
        self.max_actions = max_actions
        self.paths = tuple(PATHS if paths is None else paths)
        if not self.paths:
            raise ValueError("paths must not be empty")
        self._episodes: dict[str, int] = {}
        self._rng = random.Random(seed)
        self._actions = 0
        self._written: list[str] = []

    def reset(self, task: Task, backend: str, observation: str) -> None:
        count = self._episodes.get(task.id, 0)
        self._episodes[task.id] = count + 1
        self._rng = random.Random(f"{self.seed}/{task.id}/{count}")
        self._actions = 0
        self._written = []

    def act(self, observation: str) -> str | None:
        if self.max_actions is not None and self._actions >= self.max_actions:
            return None
        self._actions += 1
        rng = self._rng
        if rng.random() < self.submit_probability:
            return self._wrap(rng, "submit", {})
        if rng.random() < self.malformed:
            return rng.choice(self._malformers)(self, rng)
        names = list(self.tool_weights)
        tool = rng.choices(names, weights=[self.tool_weights[n] for n in names])[0]
        return self._wrap(rng, tool, self._arguments(rng, tool))

    def episode_stats(self) -> Mapping[str, Any]:
        """``stop_reason`` once ``max_actions`` is spent."""
        if self.max_actions is not None and self._actions >= self.max_actions:
            return {"stop_reason": f"max_actions ({self.max_actions}) reached"}
        return {}

    # -- well-formed calls -------------------------------------------------------------------------

    def _path(self, rng: random.Random) -> str:
        if self._written and rng.random() < 0.3:
            return rng.choice(self._written)
        return rng.choice(self.paths)

    def _content(self, rng: random.Random, path: str) -> str:
        if path.endswith(".py"):
            pool = PY_SNIPPETS + (HANG_SNIPPETS if self.allow_hangs else ())
        else:
            pool = CPP_SNIPPETS
        content = rng.choice(pool)
        if rng.random() < 0.05:
            content = content * rng.randint(2, 50)
        return content

    def _arguments(self, rng: random.Random, tool: str) -> dict[str, Any]:
        if tool == "write_file":
            path = self._path(rng)
            self._written.append(path)
            return {"path": path, "content": self._content(rng, path)}
        if tool == "edit_file":
            return {
                "path": self._path(rng),
                "old_string": rng.choice(("x", "float", "return", "ModelNew", "nothing-like-this", "\n")),
                "new_string": rng.choice(("y", "double", "", "return 0; //", "Model")),
            }
        if tool == "read_file":
            arguments: dict[str, Any] = {"path": self._path(rng)}
            if rng.random() < 0.3:
                arguments["offset"] = rng.randint(1, 200)
            if rng.random() < 0.3:
                arguments["limit"] = rng.randint(1, 5000)
            return arguments
        if tool == "profile" and rng.random() < 0.3:
            return {"ncu": True}
        return {}

    @staticmethod
    def _wrap(rng: random.Random, tool: str, arguments: dict[str, Any]) -> str:
        """One well-formed call in one of the accepted forms."""
        call = {"name": tool, "arguments": arguments}
        form = rng.randrange(4)
        if form == 0:
            return json.dumps(call)
        if form == 1:
            return f"Next step.\n<tool_call>{json.dumps(call)}</tool_call>\nDone."
        if form == 2:
            entry = {"id": f"call_{rng.randrange(1000)}", "type": "function"}
            entry["function"] = {"name": tool, "arguments": json.dumps(arguments)}
            return json.dumps(entry)
        return f"```json\n{json.dumps(call)}\n```"

    # -- malformed calls ---------------------------------------------------------------------------

    def _unknown_tool(self, rng: random.Random) -> str:
        name = rng.choice(("bash", "run", "Compile", "write-file", "submit_now", "", "read_files", "exec"))
        return json.dumps({"name": name, "arguments": {"command": "ls"}})

    def _bad_json(self, rng: random.Random) -> str:
        text = json.dumps({"name": rng.choice(tool_names()), "arguments": {"path": self._path(rng)}})
        cut = rng.randrange(len(text))
        return rng.choice((text[:cut], text.replace('"', "'"), text + ",", "<tool_call>" + text[:cut] + "</tool_call>"))

    def _bad_arguments(self, rng: random.Random) -> str:
        tool = rng.choice(tool_names())
        arguments = rng.choice(
            (
                {"unexpected": 1},
                {"path": 7},
                {"path": None, "content": ["a"]},
                {"offset": -3, "path": "model.py"},
                {"limit": "all", "path": "model.py"},
                {"old_string": "", "new_string": "x", "path": "model_new.py"},
                "not an object",
                [1, 2],
            )
        )
        return json.dumps({"name": tool, "arguments": arguments})

    def _bad_shape(self, rng: random.Random) -> str:
        call = {"name": "compile", "arguments": {}}
        return rng.choice(
            (
                json.dumps([call, call]),
                f"<tool_call>{json.dumps(call)}</tool_call><tool_call>{json.dumps(call)}</tool_call>",
                json.dumps({"name": "read_file", "path": "model.py"}),
                json.dumps({"arguments": {}}),
                json.dumps({"type": "function", "function": {"name": "read_file", "arguments": "{bad"}}),
                json.dumps({"tool_calls": []}),
                json.dumps({"tool_calls": [{"type": "function", "function": {"name": "list_files"}}]}),
            )
        )

    def _noise(self, rng: random.Random) -> str:
        return rng.choice(NOISE)

    _malformers: tuple[Callable[[RandomAgent, random.Random], str], ...] = (
        _unknown_tool,
        _bad_json,
        _bad_arguments,
        _bad_shape,
        _noise,
    )
