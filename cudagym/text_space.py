"""``PrintableText``: the text space of the environment's observations and actions, which Gymnasium's
shared-memory vector environments carry correctly.

Gymnasium's ``AsyncVectorEnv`` shares observations through shared memory by default (``shared_memory=True``). For a
``Text`` space it reads that memory once, when the vector env is built, into a tuple of ``str``; a ``str`` is a copy,
so the workers' later writes never reach it and every reset and step returned the initial ``'000...'``. Gymnasium
chooses how a space is read from shared memory by the space's type (``read_from_shared_memory`` is a
``functools.singledispatch`` function, open to registration), so this module registers, for ``PrintableText``, a
reader that returns a :class:`SharedTextBatch`: a sequence that decodes the shared buffer whenever it is read. The
vector env hands out a deep copy of it by default (``copy=True``), which is a plain tuple of the texts of that step;
with ``copy=False`` it hands out the live view itself, as it hands out a live array for a ``Box``.

So ``gym.make_vec("CudaKernel-v0", num_envs=2, vectorization_mode="async")`` works with its defaults;
``shared_memory=False`` works too (the texts then travel through the workers' pipes).
"""

from __future__ import annotations

import string
from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import read_from_shared_memory

CHARSET = string.printable
"""The characters of every observation and action: printable ASCII (what the space cannot hold is escaped first,
``cudagym.text``)."""


class PrintableText(spaces.Text):
    """A ``gymnasium.spaces.Text`` of printable ASCII (``CHARSET``), empty text allowed, that shared-memory vector
    environments read live (see the module doc).

    Args:
        max_length: the longest text of the space.
        seed: seeds the space's sampler.
    """

    def __init__(self, max_length: int, *, seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length=max_length, min_length=0, charset=CHARSET, seed=seed)


class SharedTextBatch(Sequence[str]):
    """The texts of a vector environment's sub-environments, decoded from their shared buffer on every read.

    Copying it (``copy.copy``, ``copy.deepcopy``, pickling) gives a plain tuple of the current texts; comparing it
    with a sequence compares those texts.

    Args:
        space: the single environment's space.
        shared_memory: the buffer Gymnasium made for ``n`` texts (``create_shared_memory``): one row of ``max_length``
            character indices per sub-environment, padded with ``len(space.character_set)``.
        n: the number of sub-environments.
    """

    def __init__(self, space: spaces.Text, shared_memory: Any, n: int) -> None:
        self._rows = np.frombuffer(shared_memory.get_obj(), dtype=np.int32).reshape((n, space.max_length))
        self._characters = space.character_list
        self._size = len(space.character_set)
        self._ascii = all(ord(c) < 128 for c in self._characters)
        # index -> ASCII code, for decoding a row in one numpy step
        self._codes = np.array([ord(c) for c in self._characters], dtype=np.uint8) if self._ascii else None

    def _text(self, row: np.ndarray) -> str:
        indices = row[row < self._size]
        if self._codes is not None:
            return self._codes[indices].tobytes().decode("ascii")
        return "".join(self._characters[i] for i in indices)

    def __len__(self) -> int:
        return len(self._rows)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self._text(row) for row in self._rows[index])
        return self._text(self._rows[index])

    def __iter__(self) -> Iterator[str]:
        return (self._text(row) for row in self._rows)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Sequence) and not isinstance(other, str):
            return tuple(self) == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # it changes with the buffer

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __reduce__(self) -> tuple[type, tuple[tuple[str, ...]]]:
        return tuple, (tuple(self),)

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@read_from_shared_memory.register(PrintableText)
def _read_live_texts(space: PrintableText, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(space, shared_memory, n)
