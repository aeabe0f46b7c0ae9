"""Parsing Python from many threads at once (cudagym/python_source.py): CPython's AST construction shares a depth
counter between threads, and parses beside each other fail with a SystemError unless they take turns."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time
from collections.abc import Callable

import pytest

from cudagym import python_source

# nested enough that a parse spends its time in the AST's construction, where the shared counter moves
SOURCE = "\n".join("x = " + "[" * 30 + "1" + "]" * 30 for _ in range(20))


class Cycle:
    """Garbage in a reference cycle with a finaliser: a collection during a parse runs Python code there, where the
    interpreter may switch threads."""

    def __del__(self) -> None:
        pass


def parse_beside_each_other(parse: Callable[[str], ast.Module], seconds: float) -> list[BaseException]:
    """What four threads parsing ``SOURCE`` over and over for ``seconds`` raised, with frequent collections and
    thread switches."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def work() -> None:
        while not stop.is_set():
            cycle = Cycle()
            cycle.me = cycle  # type: ignore[attr-defined]
            del cycle
            try:
                parse(SOURCE)
            except BaseException as exc:
                errors.append(exc)

    interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50)
    threads = [threading.Thread(target=work) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        time.sleep(seconds)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        sys.setswitchinterval(interval)
        gc.set_threshold(*thresholds)
    return errors


def test_parses_beside_each_other_take_turns() -> None:
    raw = parse_beside_each_other(ast.parse, 2.0)
    if not raw:
        pytest.skip("this Python's AST construction showed no race in 2 s")
    assert all(isinstance(e, SystemError) and "recursion depth mismatch" in str(e) for e in raw), raw[:3]
    assert parse_beside_each_other(python_source.parse, 2.0) == []


def test_a_parse_raises_what_ast_parse_raises() -> None:
    assert isinstance(python_source.parse("x = 1\n").body[0], ast.Assign)
    with pytest.raises(SyntaxError):
        python_source.parse("def (:\n", "model_new.py")
