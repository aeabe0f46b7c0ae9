"""``to_hf`` against Hugging Face chat templates: a real ``ChatMessages`` conversation (native calls with and without
text, several calls in one message, a call written in the text) rendered

* through the templates of ``tests/data/chat_templates/``, written here in the manner of the families that broke:
  arguments iterated as a mapping (Qwen3.5 and later), read into key/value tags (GLM-4-MoE), refused as a string
  (Gemma 4's latest revision), and content and arguments joined to text with ``+`` (DeepSeek-V3); rendered the way
  ``transformers`` renders (a sandboxed Jinja environment, its ``tojson`` and ``raise_exception``);
* through every chat template TRL bundles, with ``tokenizer.apply_chat_template`` of a tiny tokenizer built here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from cudagym.envs import CudaKernelEnv
from cudagym.tools import tool_schemas
from cudagym.wrappers import ChatMessages, to_hf, to_openai

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat_templates"
OWN = {path.stem: path.read_text() for path in sorted(TEMPLATES.glob("*.jinja"))}
TAKES = {  # the arguments forms each of our templates takes
    "iterates_arguments": {"object"},
    "key_value_arguments": {"object"},
    "refuses_string_arguments": {"object"},
    "joins_text": {"string"},
}
KERNEL = "// relu, written by the agent\nvoid relu_kernel() {}\n"


def native(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


@pytest.fixture(scope="module")
def conversations() -> Iterator[dict[str, tuple[dict[str, Any], ...]]]:
    """Two conversations as ``ChatMessages`` observes them. "parallel": a call with no text, two calls after some
    text, a call written in the text; "single": the same with one call per message."""
    env = ChatMessages(CudaKernelEnv(backend="cpu", max_turns=10))
    read = native("c1", "read_file", path="model.py", limit=5)
    write = native("c2", "write_file", path="kernels/relu.cpp", content=KERNEL)
    text_call = 'Checking.\n<tool_call>{"name": "list_files", "arguments": {}}</tool_call>'
    found = {}
    try:
        for name, actions in {
            "parallel": [[read], [write, native("c3", "list_files")]],
            "single": [[read], [write]],
        }.items():
            env.reset(options={"task_id": "builtin/relu"})
            env.step({"content": None, "tool_calls": actions[0]})
            env.step({"content": "Writing the kernel.", "tool_calls": actions[1]})
            found[name], *_ = env.step(text_call)
        yield found
    finally:
        env.close()


@pytest.fixture(scope="module")
def conversation(conversations: dict[str, tuple[dict[str, Any], ...]]) -> tuple[dict[str, Any], ...]:
    return conversations["parallel"]


def render_like_transformers(template: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """What ``apply_chat_template(..., tokenize=False)`` does with a template: a sandboxed environment with trimmed
    blocks, loop controls, a ``tojson`` that keeps non-ASCII and HTML characters, and ``raise_exception``."""

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, **kwargs: Any) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, **kwargs)

    loops = [jinja2.ext.loopcontrols]
    environment = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=loops)
    environment.filters["tojson"] = tojson
    environment.globals["raise_exception"] = raise_exception
    return environment.from_string(template).render(messages=messages, tools=tools, add_generation_prompt=True)


def assert_complete(text: str, messages: list[dict[str, Any]]) -> None:
    """Every call's name and arguments and every tool result of ``messages`` are in the rendered ``text``."""
    for message in messages:
        for call in message.get("tool_calls", ()):
            assert call["function"]["name"] in text
        if message["role"] == "tool":  # as it is, or JSON-escaped (``tojson``, as gpt-oss and Llama 3.1 write it)
            assert message["content"][:60] in text or json.dumps(message["content"][:60])[1:-1] in text
    assert "kernels/relu.cpp" in text and "relu, written by the agent" in text


def test_the_conversations_have_every_shape(conversations: dict[str, tuple[dict[str, Any], ...]]) -> None:
    roles = [m["role"] for m in conversations["single"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "assistant", "user"]
    conversation = conversations["parallel"]
    roles = [m["role"] for m in conversation]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant", "user"]
    openai = to_openai(conversation)
    assert openai[2]["content"] is None and isinstance(openai[4]["tool_calls"][0]["function"]["arguments"], str)


@pytest.mark.parametrize("name", sorted(OWN))
@pytest.mark.parametrize("form", ["object", "string"])
def test_our_templates_of_the_broken_families(name: str, form: str, conversation: tuple[dict[str, Any], ...]) -> None:
    messages = to_hf(conversation, arguments=form)  # type: ignore[arg-type]
    if form in TAKES[name]:
        assert_complete(render_like_transformers(OWN[name], messages, tool_schemas("openai")), messages)
    else:
        with pytest.raises((TypeError, jinja2.exceptions.TemplateError, jinja2.exceptions.UndefinedError)):
            render_like_transformers(OWN[name], messages, tool_schemas("openai"))


@pytest.mark.parametrize("name", sorted(OWN))
def test_our_templates_refuse_the_openai_form(name: str, conversation: tuple[dict[str, Any], ...]) -> None:
    """What broke: ``to_openai``'s messages (string arguments, None content) render through none of them."""
    with pytest.raises((TypeError, jinja2.exceptions.TemplateError, jinja2.exceptions.UndefinedError)):
        render_like_transformers(OWN[name], to_openai(conversation), tool_schemas("openai"))


# ----------------------------------------------------------------------------------- TRL's bundled templates

# What each of TRL 1.16's templates does with this conversation (what it takes was read from the template and checked
# by rendering); a template not named here must render it completely with the default, arguments="object".
STRING_ONLY = {"deepseekv3"}  # joins the arguments to text
# one call per message, any form: Llama 3.1 and 3.2 refuse parallel calls, gpt-oss renders the first alone
ONE_CALL_PER_MESSAGE = {"gptoss", "gptoss_training", "llama3_1", "llama3_2"}
ANY_FORM = {
    "deepseekv3_training",
    "gemma4",
    "gemma4_v2",
    "gemma4_v3",
    "gemma4_v4",
    "gptoss",
    "gptoss_training",
    "llama3_1",
    "llama3_2",
    "qwen2_5",
    "qwen2_5_training",
    "qwen3",
    "qwen3_training",
    "qwen3_instruct_2507",
    "qwen3_instruct_2507_training",
    "qwen3_vl",
    "qwen3_vl_training",
}
NO_TOOL_CALLS = {  # render the conversation but leave tool calls out (the template has no tool calling)
    "deepseek_r1_distill",  # drops tool_calls whenever content is set (TRL's notes)
    "deepseek_r1_distill_training",
    "lfm2",
    "lfm2_training",
    "llama3",
    "llama3_training",
    "phi3",
    "phi3_training",
    "phi3_5",
    "phi3_5_training",
    "qwen2_5_vl",
    "qwen2_5_vl_training",
}
CANNOT_RENDER = {  # refuse the conversation whatever its form: the reason is the template's own
    "cohere": "roles must alternate user/assistant (no tool role)",
    "cohere_training": "roles must alternate user/assistant (no tool role)",
    "cohere2": "roles must alternate user/assistant (no tool role)",
    "cohere2_training": "roles must alternate user/assistant (no tool role)",
    "gemma": "no system role",
    "gemma_training": "no system role",
    "gemma3": "roles must alternate user/assistant (no tool role)",
    "gemma3_training": "roles must alternate user/assistant (no tool role)",
    "idefics3": "content must be a list of multimodal parts",
    "idefics3_training": "content must be a list of multimodal parts",
    "smolvlm": "content must be a list of multimodal parts",
    "smolvlm_training": "content must be a list of multimodal parts",
    "llava_next": "content must be a list of multimodal parts",
    "llava_next_training": "content must be a list of multimodal parts",
}


def trl_templates() -> dict[str, str]:
    try:
        import trl
    except ImportError:  # the parametrisation below then skips
        return {}
    folder = Path(trl.__file__).parent / "chat_templates"
    return {path.stem: path.read_text() for path in sorted(folder.glob("*.jinja"))}


TRL_TEMPLATES = trl_templates()


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    """A tokenizer of two words, built here (nothing downloaded), whose chat template each test sets."""
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    model = tokenizers.models.WordLevel({"<unk>": 0, "kernel": 1}, unk_token="<unk>")
    backend = tokenizers.Tokenizer(model)
    backend.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=backend, unk_token="<unk>", bos_token="<unk>", eos_token="<unk>"
    )


def apply(tokenizer: Any, template: str, messages: list[dict[str, Any]]) -> str:
    tokenizer.chat_template = template
    return tokenizer.apply_chat_template(messages, tools=tool_schemas("openai"), tokenize=False)


def test_trl_bundles_the_templates_this_file_knows() -> None:
    if not TRL_TEMPLATES:
        pytest.skip("trl is not installed")
    named = STRING_ONLY | ONE_CALL_PER_MESSAGE | ANY_FORM | NO_TOOL_CALLS | set(CANNOT_RENDER)
    assert named <= set(TRL_TEMPLATES), f"no longer bundled: {sorted(named - set(TRL_TEMPLATES))}"
    assert {"qwen3_5_think", "glm4moe", "gemma4_v5"} <= set(TRL_TEMPLATES) - named  # the default form is theirs


@pytest.mark.parametrize("name", sorted(TRL_TEMPLATES) or [pytest.param("none", marks=pytest.mark.skip("no trl"))])
def test_every_trl_template(name: str, tokenizer: Any, conversations: dict[str, tuple[dict[str, Any], ...]]) -> None:
    template = TRL_TEMPLATES[name]
    conversation = conversations["parallel"]
    if name in ONE_CALL_PER_MESSAGE:
        conversation = conversations["single"]
    objects, strings = to_hf(conversation), to_hf(conversation, arguments="string")
    if name in CANNOT_RENDER:
        with pytest.raises((TypeError, jinja2.exceptions.TemplateError, jinja2.exceptions.UndefinedError)):
            apply(tokenizer, template, objects)
        pytest.skip(f"{name}: {CANNOT_RENDER[name]}")
    if name in NO_TOOL_CALLS:
        for messages in (objects, strings):
            text = apply(tokenizer, template, messages)
            assert conversation[1]["content"][:60] in text and "relu, written by the agent" not in text
        return
    any_form = ANY_FORM | ONE_CALL_PER_MESSAGE
    takes = {"string"} if name in STRING_ONLY else {"object", "string"} if name in any_form else {"object"}
    for form, messages in (("object", objects), ("string", strings)):
        if form in takes:
            assert_complete(apply(tokenizer, template, messages), messages)
        else:
            with pytest.raises((TypeError, jinja2.exceptions.TemplateError, jinja2.exceptions.UndefinedError)):
                apply(tokenizer, template, messages)


def test_deepseek_v3_needs_text_for_a_null_content(tokenizer: Any, conversation: tuple[dict[str, Any], ...]) -> None:
    if "deepseekv3" not in TRL_TEMPLATES:
        pytest.skip("trl is not installed")
    with_none = [dict(m, content=None) if m.get("tool_calls") else m for m in to_hf(conversation, arguments="string")]
    with pytest.raises((TypeError, jinja2.exceptions.UndefinedError)):
        apply(tokenizer, TRL_TEMPLATES["deepseekv3"], with_none)
    text = apply(tokenizer, TRL_TEMPLATES["deepseekv3"], to_hf(conversation, arguments="string", null_content=""))
    assert "kernels/relu.cpp" in text
