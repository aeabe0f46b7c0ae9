"""Observation text: printable ASCII only (what the space cannot hold escaped, reversibly), paths hidden, long
text cut head and tail."""

from __future__ import annotations

import string

from hypothesis import assume, given
from hypothesis import strategies as st

from cudagym.text import clean, cut, find_shown, to_printable, unescape


def test_characters_outside_the_charset_are_escaped_and_nothing_else_changes() -> None:
    raw = "\x1b[31merror\x1b[0m: \u2018x\u2019 took 5 \u00b5s \u2192 \U0001f600\x00 \\n\ttab\r\n"
    text = to_printable(raw)
    assert text == (
        "\\u001b[31merror\\u001b[0m: \\u2018x\\u2019 took 5 \\u00b5s \\u2192 \\U0001f600\\u0000 \\n\ttab\r\n"
    )
    assert set(text) <= set(string.printable)
    assert unescape(text) == raw
    assert unescape("\\u0041 \\ud800 \\U00110000") == "\\u0041 \\ud800 \\U00110000"  # never written: left as is


@given(st.text())
def test_escaping_round_trips(raw: str) -> None:
    assume(unescape(raw) == raw)  # the text holds no escape of its own that reads as one of a character
    text = to_printable(raw)
    assert set(text) <= set(string.printable)
    assert unescape(text) == raw
    assert clean(raw) == text


def test_shown_text_is_found_in_the_original() -> None:
    raw = "caf\u00e9 = 1; caf\u00e9 = 2; \u00e9t\u00e9"
    assert find_shown(raw, "caf\\u00e9 = 2") == [(10, 18)]
    assert find_shown(raw, "caf\\u00e9") == [(0, 4), (10, 14)]
    assert find_shown(raw, "\\u00e9t") == [(20, 22)]
    assert find_shown(raw, "00e9") == [] and find_shown(raw, "u00e9 =") == []  # inside an escape: no match
    assert find_shown(raw, "") == []


@given(st.data())
def test_every_span_of_the_original_is_found_as_shown(data: st.DataObject) -> None:
    raw = data.draw(st.text(min_size=1))
    start = data.draw(st.integers(0, len(raw) - 1))
    end = data.draw(st.integers(start + 1, len(raw)))
    shown = to_printable(raw[start:end])
    spans = find_shown(raw, shown)
    assert all(to_printable(raw[s:e]) == shown for s, e in spans)
    assert any(s <= start < e or start <= s < end for s, e in spans)


def test_cut_keeps_head_and_tail_within_the_limit() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = cut(text, 500)
    assert len(out) <= 500
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert "characters omitted" in out
    assert cut("short", 500) == "short"


def test_clean_hides_workspace_paths() -> None:
    assert clean("/tmp/ws-1/kernels/a.cu:3: error", replace_paths={"/tmp/ws-1": ""}) == "kernels/a.cu:3: error"
