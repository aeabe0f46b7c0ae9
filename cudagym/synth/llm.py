"""The optional LLM composer: an OpenAI-compatible chat endpoint (the client the LLM agent uses,
``cudagym.baselines.llm_agent``) is shown a sample of the catalogue's ops and asked for one fused task in KernelBench's
format. What it answers is only text: it is parsed, checked for the format here, and then goes through the same
decontamination and execution filters as the rule-based composer's tasks (in the trusted reference process).
"""

from __future__ import annotations

import ast
import dataclasses
import logging
import random
import re
from collections.abc import Sequence
from typing import Any

from cudagym import python_source
from cudagym.errors import CudaGymError
from cudagym.synth.catalogue import OpSpec
from cudagym.synth.compose import draw_ops_count
from cudagym.synth.records import Candidate
from cudagym.tasks.kernelbench import derive_ops
from cudagym.tasks.requirements import imported_packages

logger = logging.getLogger(__name__)

SAMPLE = 12
"""Ops shown to the model per request."""
SYSTEM_PROMPT = (
    "You write PyTorch reference programs for a GPU-kernel benchmark. Each is one Python file with module-level size "
    "constants, a class Model(nn.Module) whose __init__ takes the sizes its layers need, a forward that chains the "
    "requested operators (the output of one feeding the next; broadcasting, reductions with keepdim and residual "
    "connections are welcome), get_inputs() returning a list of random input tensors and get_init_inputs() returning "
    "the constructor arguments. It must be deterministic (no dropout, no random ops in forward). Answer with the file "
    "in one ```python block and nothing else."
)
_BLOCK = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)
REQUIRED = ("Model", "get_inputs", "get_init_inputs")


class LLMInvalid(CudaGymError, ValueError):
    """The endpoint's answer is not a task (no code, code that does not parse, a missing part, no torch op), or the
    request failed."""


@dataclasses.dataclass(frozen=True)
class LLMSettings:
    """The endpoint: ``base_url`` (e.g. ``http://localhost:8000/v1``), ``model``, ``api_key`` (None: as the LLM agent
    resolves it), sampling ``temperature`` and ``max_tokens``, and ``timeout`` seconds per request."""

    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 2048
    timeout: float = 120.0


def extract_code(text: str) -> str:
    """The task file in an answer: its first ```python block, else the whole text; LLMInvalid when it is not a
    KernelBench-format file."""
    match = _BLOCK.search(text or "")
    code = (match.group(1) if match else text or "").strip() + "\n"
    try:
        tree = python_source.parse(code)
    except SyntaxError as exc:
        raise LLMInvalid(f"the answer's code does not parse: {exc.msg} (line {exc.lineno})") from None
    defined = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
    missing = [name for name in REQUIRED if name not in defined]
    if missing:
        raise LLMInvalid(f"the answer's code defines no {', '.join(missing)}")
    return code


class LLMComposer:
    """Asks an endpoint for tasks. ``client``: an ``openai.OpenAI``-like client (None: one is made from
    ``settings``)."""

    def __init__(
        self, settings: LLMSettings, ops: Sequence[OpSpec], ops_range: tuple[int, int], client: Any = None
    ) -> None:
        self.settings = settings
        self.ops = sorted(ops, key=lambda op: op.name)
        self.ops_range = ops_range
        if client is None:
            from cudagym.baselines.llm_agent import LLMConfig

            try:
                import openai
            except ImportError as exc:  # pragma: no cover - depends on the installation
                raise ImportError("the LLM composer needs the openai package: pip install 'cudagym[openai]'") from exc
            key = LLMConfig(model=settings.model, base_url=settings.base_url, api_key=settings.api_key)
            client = openai.OpenAI(
                base_url=settings.base_url, api_key=key.resolved_api_key(), max_retries=2, timeout=settings.timeout
            )
        self.client = client

    def prompt(self, rng: random.Random) -> str:
        count = draw_ops_count(rng, *self.ops_range)
        sample = rng.sample(self.ops, min(SAMPLE, len(self.ops)))
        listed = "\n".join(f"- {op.name}{op.signature}" for op in sample)
        return f"Compose {count} of these operators into one task (use exactly {count} operator calls):\n{listed}\n"

    def candidate(self, index: int, seed: int) -> Candidate:
        """The candidate of one request; LLMInvalid when the answer is not a task."""
        rng = random.Random(seed)
        messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": self.prompt(rng)}]
        try:
            response = self.client.chat.completions.create(
                model=self.settings.model,
                messages=messages,
                temperature=self.settings.temperature,
                max_tokens=self.settings.max_tokens,
                seed=seed % 2**31,
            )
            text = response.choices[0].message.content or ""
        except Exception as exc:  # the endpoint's failure is this candidate's drop reason, not the run's end
            raise LLMInvalid(f"the request failed: {type(exc).__name__}: {str(exc)[:200]}") from None
        code = extract_code(text)
        ops = derive_ops(code)
        if not ops:
            raise LLMInvalid("the answer's code calls no torch operator")
        family = "transformers" if "transformers" in imported_packages(code) else "torch"
        return Candidate(index, seed, code, ops, f"{family}#{len(ops)}", (), origin="llm")
