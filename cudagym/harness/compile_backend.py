"""torch.compile's inductor with the device's shared slot taken after code generation, before the first run.

A reference's first torch.compile call traces the model, generates and builds its kernels (seconds of CPU work), then
runs it (and autotunes kernels with several configurations: device work). Every timing on the machine waits for the
shared slot's holders to leave, so a compile that held the slot through its code generation made every other
environment's timing wait for CPU work. :class:`SlotAfterCodegen` is a torch.compile backend that calls the inductor
(the same function ``torch.compile(model)`` uses by default) and takes the slot when the inductor returns: the first
graph's code exists, nothing of it has run yet. The slot is held until :meth:`SlotAfterCodegen.release`, which the
caller runs after the first call returns. A model split by graph breaks generates its later graphs inside the slot.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from .common import warmup_slot


class SlotAfterCodegen:
    """A torch.compile backend: the inductor, then the shared slot ``slot`` ("LOCK:GATE", empty: none) held from the
    end of the first graph's code generation until :meth:`release`.

    ``on_stage`` is told "slot" when the code exists and the slot is asked for, then "run" once it is held.
    ``built_at`` and ``slotted_at`` are those moments (``time.perf_counter``; None until they happen)."""

    def __init__(self, slot: str, on_stage: Callable[[str], None] = lambda stage: None) -> None:
        self.slot = slot
        self.on_stage = on_stage
        self.built_at: float | None = None
        self.slotted_at: float | None = None
        self._held = contextlib.ExitStack()

    def __call__(self, graph: Any, example_inputs: list[Any]) -> Any:
        from torch._inductor.compile_fx import compile_fx

        compiled = compile_fx(graph, example_inputs)
        if self.built_at is None:
            self.built_at = time.perf_counter()
            self.on_stage("slot")
            self._held.enter_context(warmup_slot(self.slot))
            self.slotted_at = time.perf_counter()
            self.on_stage("run")
        return compiled

    def release(self) -> None:
        """Gives the slot back (idempotent; nothing when it was never taken)."""
        self._held.close()
