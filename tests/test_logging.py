"""Logging: the library prints nothing until the application configures logging (a NullHandler on ``cudagym``), its
modules log under ``cudagym.<module>``, and ``cudagym --log-level`` sends those records to stderr."""

from __future__ import annotations

import logging
import subprocess
import sys
from collections.abc import Iterator

import pytest

from cudagym.cli import main


@pytest.fixture
def cli_logging() -> Iterator[None]:
    """Takes away what ``configure_logging`` sets on the ``cudagym`` logger."""
    logger = logging.getLogger("cudagym")
    level, handlers = logger.level, list(logger.handlers)
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)


def test_the_library_is_silent_until_logging_is_configured() -> None:
    code = (
        "import logging, cudagym\n"
        "assert any(isinstance(h, logging.NullHandler) for h in logging.getLogger('cudagym').handlers)\n"
        "logging.getLogger('cudagym.tasks.hub').warning('a warning nobody asked to see')\n"
        "logging.getLogger('elsewhere').warning('shown by the last-resort handler')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "nobody asked" not in done.stderr and "last-resort" in done.stderr


def test_log_level_before_or_after_the_command(capsys: pytest.CaptureFixture[str], cli_logging: None) -> None:
    assert main(["--log-level", "debug", "tasks", "list"]) == 0
    assert "DEBUG cudagym.tasks.registry: task set 'builtin': 36 task(s)" in capsys.readouterr().err
    assert main(["tasks", "--log-level", "debug", "list"]) == 0
    assert capsys.readouterr().err.count("DEBUG cudagym.tasks.registry") == 1  # one handler, not two
    assert main(["tasks", "list"]) == 0  # the default: warnings and errors only
    captured = capsys.readouterr()
    assert "DEBUG" not in captured.err and "36 task(s) in 'builtin'" in captured.out
    with pytest.raises(SystemExit):
        main(["--log-level", "loud", "tasks", "list"])


def test_loaders_log_what_they_loaded(caplog: pytest.LogCaptureFixture) -> None:
    import cudagym.tasks

    rows = [{"code": "import torch\nx = torch.relu", "ops": ["torch.relu"], "data_source": "torch#1"}]
    with caplog.at_level(logging.INFO, logger="cudagym"):
        cudagym.tasks.load("ops6k", dataset=rows)
    assert ("cudagym.tasks.ops6k", logging.INFO, "Ops-6K: 1 task(s) from dataset=") in caplog.record_tuples
