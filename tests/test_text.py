"""Observation text: printable ASCII only, paths hidden, long text cut head and tail."""

from __future__ import annotations

import string

from cudagym.text import clean, cut, to_printable


def test_unicode_and_colour_codes_become_printable_ascii() -> None:
    text = to_printable("\x1b[31merror\x1b[0m: \u2018x\u2019 took 5 \u00b5s \u2192 \U0001f600\x00")
    assert text == "error: 'x' took 5 us -> ??"
    assert set(text) <= set(string.printable)


def test_cut_keeps_head_and_tail_within_the_limit() -> None:
    text = "HEAD" + "x" * 10_000 + "TAIL"
    out = cut(text, 500)
    assert len(out) <= 500
    assert out.startswith("HEAD") and out.endswith("TAIL")
    assert "characters omitted" in out
    assert cut("short", 500) == "short"


def test_clean_hides_workspace_paths() -> None:
    assert clean("/tmp/ws-1/kernels/a.cu:3: error", replace_paths={"/tmp/ws-1": ""}) == "kernels/a.cu:3: error"
