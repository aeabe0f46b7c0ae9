"""The tool protocol: the three accepted call forms, and a helpful observation for every malformed call."""

from __future__ import annotations

import json

import pytest

from cudagym.tools import (
    TOOLS,
    Compile,
    EditFile,
    ParseFailure,
    Profile,
    WriteFile,
    describe_tools,
    parse_action,
    tool_schemas,
)

CANONICAL = {"name": "write_file", "arguments": {"path": "kernels/a.cu", "content": "x"}}


@pytest.mark.parametrize(
    "action",
    [
        json.dumps(CANONICAL),
        f"I will write the kernel.\n<tool_call>{json.dumps(CANONICAL)}</tool_call>\n",
        f"```json\n{json.dumps(CANONICAL)}\n```",
        {"type": "function", "function": {"name": "write_file", "arguments": json.dumps(CANONICAL["arguments"])}},
        json.dumps(
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "write_file", "arguments": json.dumps(CANONICAL["arguments"])},
            }
        ),
        json.dumps(
            {
                "tool_calls": [
                    {"type": "function", "function": {"name": "write_file", "arguments": CANONICAL["arguments"]}}
                ]
            }
        ),
    ],
    ids=["json", "tagged", "fenced", "openai-object", "openai-text", "openai-list"],
)
def test_accepted_forms_parse_to_the_same_call(action: object) -> None:
    assert parse_action(action) == WriteFile(path="kernels/a.cu", content="x")


def test_tools_without_arguments_accept_missing_or_empty_arguments() -> None:
    assert parse_action('{"name": "compile"}') == Compile()
    assert parse_action({"type": "function", "function": {"name": "compile", "arguments": ""}}) == Compile()
    assert parse_action('{"name": "profile", "arguments": {"ncu": true}}') == Profile(ncu=True)


@pytest.mark.parametrize(
    ("action", "problem", "needle"),
    [
        ("", "empty", "empty"),
        ("   \n ", "empty", "empty"),
        ("please compile my code", "no_call", "No tool call found"),
        ('{"name": "compile", "arguments": {', "bad_json", "Could not parse"),
        ("<tool_call>{not json}</tool_call>", "bad_json", "Could not parse"),
        ('<tool_call>{"name": "compile"}', "bad_shape", "not closed"),
        ('{"name": "rm", "arguments": {"path": "/"}}', "unknown_tool", "Unknown tool 'rm'"),
        ('{"name": "compil", "arguments": {}}', "unknown_tool", "Did you mean 'compile'"),
        ('{"name": "write_file", "arguments": {"path": "kernels/a.cu"}}', "bad_arguments", "content: Field required"),
        (
            '{"name": "write_file", "arguments": {"path": "a", "content": "b", "mode": "w"}}',
            "bad_arguments",
            "mode: Extra inputs are not permitted",
        ),
        ('{"name": "read_file", "arguments": {"path": 3}}', "bad_arguments", "path: Input should be a valid string"),
        (
            '{"name": "edit_file", "arguments": {"path": "a", "old_string": "", "new_string": "b"}}',
            "bad_arguments",
            "old_string",
        ),
        ('{"name": "compile", "arguments": [1]}', "bad_arguments", '"arguments" must be a JSON object'),
        ('{"arguments": {}}', "bad_shape", 'no "name"'),
        ('{"name": "compile", "path": "x"}', "bad_shape", "Unexpected top-level field"),
        ('[{"name": "compile"}, {"name": "verify"}]', "several_calls", "one per turn"),
        (
            '<tool_call>{"name": "compile"}</tool_call><tool_call>{"name": "verify"}</tool_call>',
            "several_calls",
            "one per turn",
        ),
        ('{"type": "function", "function": {"name": "compile", "arguments": "{oops"}}', "bad_json", "not valid JSON"),
        ("[42]", "bad_shape", "must be a JSON object"),
    ],
)
def test_malformed_calls_explain_the_problem(action: str, problem: str, needle: str) -> None:
    result = parse_action(action)
    assert isinstance(result, ParseFailure)
    assert result.problem == problem
    assert needle in result.message


def test_bad_arguments_show_the_right_form() -> None:
    result = parse_action('{"name": "edit_file", "arguments": {"path": "kernels/a.cu"}}')
    assert isinstance(result, ParseFailure)
    assert "edit_file takes: path, old_string, new_string" in result.message
    assert EditFile.example() in result.message


def test_non_text_actions_are_refused_politely() -> None:
    assert isinstance(parse_action(3.5), ParseFailure)
    assert parse_action(b'{"name": "compile"}') == Compile()


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "json"])
def test_schemas_cover_every_tool(fmt: str) -> None:
    schemas = tool_schemas(fmt)  # type: ignore[arg-type]
    names = [s["function"]["name"] if fmt == "openai" else s["name"] for s in schemas]
    assert names == [t.tool_name() for t in TOOLS]
    key = {"openai": "parameters", "anthropic": "input_schema", "json": "parameters"}[fmt]
    write = schemas[0]["function"][key] if fmt == "openai" else schemas[0][key]
    assert write["required"] == ["path", "content"]
    assert write["additionalProperties"] is False


def test_instructions_list_every_tool_with_an_example() -> None:
    text = describe_tools()
    for tool in TOOLS:
        assert f"- {tool.tool_name()}:" in text
        assert tool.example() in text
        assert isinstance(parse_action(tool.example()), tool)
