"""Task sets read from the Hugging Face Hub: ``datasets.load_dataset``, after a quick check that the Hub can be reached.

Without that check, ``load_dataset`` on a machine that cannot reach the Hub retries for about 30 s before it fails.
:func:`require_datasets` returns a loader that first looks, in well under a second where the network refuses and at
most ``PROBE_TIMEOUT_S`` where it stays silent, whether the Hub is reachable: not when ``HF_HUB_OFFLINE`` or
``HF_DATASETS_OFFLINE`` is set, nor when no TCP connection opens to the Hub's endpoint (``HF_ENDPOINT``, default
huggingface.co) or to the HTTPS proxy in between. Then it raises :class:`HubUnreachable`, whose message says how to
pass the data instead (``path=``, ``dataset=``, the set's environment variable).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

from cudagym.errors import CudaGymError

logger = logging.getLogger(__name__)

OFFLINE_ENV = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
PROXY_ENV = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")
DEFAULT_ENDPOINT = "https://huggingface.co"
PROBE_TIMEOUT_S = 3.0


class HubUnreachable(CudaGymError, ConnectionError):
    """The Hugging Face Hub cannot be reached from here (offline mode, or no connection opens)."""


def _is_set(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _probe_address() -> tuple[str, int]:
    """The host and port a Hub request connects to first: the HTTPS proxy's when one is set, else the endpoint's."""
    proxy = next((os.environ[name] for name in PROXY_ENV if os.environ.get(name)), None)
    if proxy:
        url = urllib.parse.urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    else:
        url = urllib.parse.urlsplit(os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT)
    port = url.port or (443 if url.scheme == "https" else 80)
    return url.hostname or "huggingface.co", port


def hub_unreachable_reason(timeout: float = PROBE_TIMEOUT_S) -> str | None:
    """Why the Hub cannot be reached now (offline mode, or a TCP connection that fails or stays silent for
    ``timeout`` seconds, name resolution included), or None when a connection opened."""
    for name in OFFLINE_ENV:
        if _is_set(os.environ.get(name)):
            return f"${name} is set"
    host, port = _probe_address()
    outcome: list[str | None] = []

    def connect() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.append(None)
        except OSError as exc:
            outcome.append(f"no connection to {host}:{port} ({exc.strerror or exc})")

    # in a thread: name resolution has no timeout of its own
    probe = threading.Thread(target=connect, name="cudagym-hub-probe", daemon=True)
    probe.start()
    probe.join(timeout)
    if not outcome:
        return f"{host}:{port} did not answer within {timeout:g} s"
    return outcome[0]


def require_datasets(how_to_pass: str = "pass path= (a local copy) or dataset= (its rows)") -> Callable[..., Any]:
    """A ``load_dataset(name, *, split)`` for the Hub that raises :class:`HubUnreachable` at once (naming
    ``how_to_pass``, the ways to give the data without the Hub) where the Hub cannot be reached.

    Raises:
        ImportError: ``datasets`` is not installed (the message says how to get it).
    """
    try:
        from datasets import load_dataset
    except ImportError as exc:
        raise ImportError(
            "loading a task set from the Hugging Face Hub needs the `datasets` package: "
            f"`pip install datasets` (or {how_to_pass})"
        ) from exc

    def load(name: str, *, split: str) -> Any:
        reason = hub_unreachable_reason()
        if reason is not None:
            raise HubUnreachable(
                f"{name} is on the Hugging Face Hub, which cannot be reached from here: {reason}. "
                f"Instead, {how_to_pass}"
            )
        logger.info("loading %s (split %s) from the Hugging Face Hub", name, split)
        return load_dataset(name, split=split)

    return load
