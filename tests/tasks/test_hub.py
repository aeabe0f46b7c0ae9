"""Task sets without the Hub, and the Hub when it cannot be reached: ``dataset=`` (a ``datasets.Dataset``, a
``DatasetDict`` or rows) gives the same tasks as the files; offline mode or a refused connection fails at once with a
message that says how to pass the data; unknown options are refused with the valid ones named. No test here sends
anything beyond the loopback interface."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import cudagym.tasks
from cudagym.tasks import HubUnreachable, Task, ops6k
from cudagym.tasks import hub as hub_module
from cudagym.tasks.hub import OFFLINE_ENV, PROXY_ENV, hub_unreachable_reason
from cudagym.tasks.kernelbench import load_kernelbench
from cudagym.tasks.ops6k import load_ops6k

datasets = pytest.importorskip("datasets")


def summary(tasks: list[Task]) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(t.id, t.source, t.metadata.ops) for t in tasks]


@pytest.fixture
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """No offline switch and no proxy: the probe goes where ``HF_ENDPOINT`` says."""
    for name in (*OFFLINE_ENV, *PROXY_ENV):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def listening_endpoint() -> Iterator[str]:
    """A loopback address that accepts connections (and answers nothing)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


def test_offline_mode_fails_at_once_and_says_how_to_pass_the_data(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    started = time.monotonic()
    with pytest.raises(HubUnreachable, match=r"HF_HUB_OFFLINE is set.*path=.*dataset=.*CUDAGYM_KERNELBENCH_DIR"):
        cudagym.tasks.load("kernelbench", source="hub")
    with pytest.raises(HubUnreachable, match=r"CUDA-Agent-Ops-6K.*dataset=.*CUDAGYM_OPS6K_PATH"):
        cudagym.tasks.load("ops6k")  # auto: no path, so the Hub
    assert time.monotonic() - started < 2


def test_a_refused_connection_fails_at_once(online: None, closed_port: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed_port}")
    started = time.monotonic()
    with pytest.raises(HubUnreachable, match=rf"no connection to 127.0.0.1:{closed_port}.*dataset="):
        load_kernelbench(source="hub", level=1)
    assert time.monotonic() - started < 2


def test_a_silent_endpoint_fails_after_the_probe_timeout(online: None, monkeypatch: pytest.MonkeyPatch) -> None:
    def silent(*args: Any, **kwargs: Any) -> socket.socket:
        time.sleep(5)  # then as a real connect would after its own timeout
        raise TimeoutError("timed out")

    monkeypatch.setattr(hub_module.socket, "create_connection", silent)
    started = time.monotonic()
    assert hub_unreachable_reason(timeout=0.2) == "huggingface.co:443 did not answer within 0.2 s"
    assert time.monotonic() - started < 1


def test_the_probe_connects_to_the_proxy_when_there_is_one(
    online: None, closed_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"127.0.0.1:{closed_port}")
    assert hub_unreachable_reason().startswith(f"no connection to 127.0.0.1:{closed_port}")


def test_a_reachable_hub_is_asked(online: None, listening_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_ENDPOINT", listening_endpoint)
    asked = []

    def fake_load_dataset(name: str, *, split: str) -> list[dict[str, Any]]:
        asked.append((name, split))
        return [{"code": "x = 1", "ops": ["torch.relu"], "data_source": "torch#1"}]

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    assert [t.id for t in load_ops6k(source="hub")] == ["ops6k/0000"]
    assert asked == [(ops6k.HF_DATASET, "train")]


def test_kernelbench_from_a_dataset(
    kernelbench_root: Path, kernelbench_tasks: list[Task], hub_rows: Callable[..., list[dict[str, Any]]]
) -> None:
    level1, level2 = hub_rows(kernelbench_root, 1), hub_rows(kernelbench_root, 2)
    splits = datasets.DatasetDict(
        {"level_1": datasets.Dataset.from_list(level1), "level_2": datasets.Dataset.from_list(level2)}
    )
    assert summary(load_kernelbench(dataset=splits)) == summary(kernelbench_tasks)
    one_split = datasets.Dataset.from_list(level2 + level1)  # any order: the tasks come sorted
    assert summary(list(cudagym.tasks.load("kernelbench", dataset=one_split))) == summary(kernelbench_tasks)
    level2_only = cudagym.tasks.load("kernelbench", dataset=iter(level1 + level2), level=2)
    assert summary(list(level2_only)) == summary([t for t in kernelbench_tasks if t.metadata.level == 2])
    assert {t.metadata.level for t in load_kernelbench(dataset=splits, level=1)} == {1}
    with pytest.raises(TypeError, match="not both"):
        load_kernelbench(kernelbench_root, dataset=splits)
    with pytest.raises(TypeError, match="path="):
        load_kernelbench(dataset=str(kernelbench_root))


def test_ops6k_from_a_dataset(ops6k_rows: list[dict[str, Any]], ops6k_parquet: Path) -> None:
    expected = summary(load_ops6k(ops6k_parquet))
    assert summary(load_ops6k(dataset=datasets.Dataset.from_list(ops6k_rows))) == expected
    assert summary(list(cudagym.tasks.load("ops6k", dataset=ops6k_rows))) == expected
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_list(ops6k_rows)})
    assert summary(load_ops6k(dataset=splits)) == expected
    with pytest.raises(ValueError, match="'train'"):
        load_ops6k(dataset={"test": ops6k_rows})


def test_a_misspelt_option_is_refused_with_the_valid_ones() -> None:
    with pytest.raises(TypeError, match=r"unknown option\(s\) for task set 'kernelbench': datset; valid: .*dataset.*"
                       r"Did you mean 'dataset'\?"):  # fmt: skip
        cudagym.tasks.load("kernelbench", datset=[])
    with pytest.raises(TypeError, match=r"'ops6k': sourse; valid: dataset, ids, level, names, ops, path, precision"):
        cudagym.tasks.load("ops6k", sourse="hub")
