"""The LLM composer through a loopback OpenAI-compatible endpoint: its tasks go through the same filters."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chat_stub import text_reply

from cudagym.synth.filters import FilterConfig
from cudagym.synth.llm import LLMInvalid, LLMSettings, extract_code
from cudagym.synth.pipeline import JOURNAL, Pipeline, SynthConfig
from cudagym.synth.records import DropReason

TASK = """Here it is:

```python
import torch
import torch.nn as nn

batch_size = 128
features = 1024


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        y = torch.sigmoid(self.linear(x))
        return y - torch.mean(y, dim=-1, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
```
"""


def test_answers_that_are_not_tasks_are_refused() -> None:
    with pytest.raises(LLMInvalid, match="does not parse"):
        extract_code("```python\ndef broken(:\n```")
    with pytest.raises(LLMInvalid, match="get_init_inputs"):
        extract_code("```python\nclass Model: pass\ndef get_inputs(): return []\n```")
    assert extract_code(TASK).startswith("import torch")


def test_llm_tasks_go_through_the_filters(
    tmp_path: Path, chat_stub, catalogue_file: Path, synth_filters: FilterConfig, cache_dir: Path
) -> None:
    stub = chat_stub([text_reply("I cannot help with that."), 503, 503, 503, text_reply(TASK)])
    config = SynthConfig(
        out=tmp_path,
        count=1,
        catalogue=catalogue_file,
        llm=LLMSettings(stub.base_url, "stub-model", api_key="k"),
        filters=synth_filters,
        cache_dir=cache_dir,
        max_candidates=4,
    )
    result = Pipeline(config).run()
    reasons = [o.verdict.reason for o in result.outcomes]
    assert reasons[0] is DropReason.LLM_INVALID
    assert reasons[1] is DropReason.LLM_INVALID  # the endpoint failed after its retries: data, not a crash
    assert all(o.origin == "llm" for o in result.outcomes)
    accepted = result.accepted
    assert len(accepted) == 1 and accepted[0].origin == "llm", result.outcomes
    assert accepted[0].ops == ("torch.nn.Linear", "torch.sigmoid", "torch.mean")
    assert accepted[0].data_source == "torch#3"
    request = stub.requests[0]
    assert request["model"] == "stub-model" and "Compose" in request["messages"][1]["content"]
    journal = [json.loads(line) for line in (tmp_path / JOURNAL).read_text().splitlines()]
    assert journal[0]["verdict"]["reason"] == "llm_invalid"
