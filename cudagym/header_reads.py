"""What torch's headers hold, read by the preprocessor for a single-file solution's build (``cudagym.inline_build``).

Two reads, each a preprocessor run of torch's headers (a second or more) made once per toolchain, flags and workspace
headers, then kept in the cache folder and in this process:

* the light headers' guard (:meth:`HeaderReads.heavy_only`, ``cudagym.light_headers.heavy_only``): what the heavy torch
  headers add to a probe's light ones, for a unit's compile command; under ``<cache>/light``;
* the words of the torch headers a split file's device unit leaves out (:meth:`HeaderReads.torch_words`,
  ``cudagym.split_errors.torch_words``), which tell a broken kernel edit's own errors from a split's; under
  ``<cache>/split/words``, the :data:`KEPT_WORD_LISTS` most recently used kept.

The preprocessor runs in the compiler sandbox, as the builder's compiles do.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cudagym import light_headers, split_errors
from cudagym.build import Builder, compiler_identity, content_hash
from cudagym.light_headers import HeavyOnly
from cudagym.workspace_headers import WorkspaceHeaders

logger = logging.getLogger(__name__)

KEPT_WORD_LISTS = 32  # the lists of torch's words a cache keeps (<cache>/split/words, about a megabyte each)

# what the heavy headers add, by cache folder, toolchain, flags and probe (this process)
_HEAVY_ONLY: dict[tuple[str, str], HeavyOnly | None] = {}
# the words of the torch headers split files leave out of their device units, by cache folder, toolchain, flags and
# directives (this process; the most recently used last, a quarter of KEPT_WORD_LISTS kept)
_TORCH_WORDS: dict[tuple[str, str], frozenset[str] | None] = {}
# its reorderings and evictions, which threads of one process (envs on one pool) do side by side
_TORCH_WORDS_LOCK = threading.Lock()


def is_nvcc(compiler: str) -> bool:
    return Path(compiler).name.startswith("nvcc")


class HeaderReads:
    """The reads of torch's headers for ``builder``'s compiles (its cache folder, toolchain and sandbox)."""

    def __init__(self, builder: Builder) -> None:
        self.builder = builder

    def heavy_only(
        self, command: Sequence[str], probe: light_headers.Probe, view: WorkspaceHeaders
    ) -> HeavyOnly | None:
        """What the heavy torch headers add to ``probe``'s light ones for a unit's ``command`` (the module's name
        aside): read once per toolchain, flags and probe from the preprocessor's output of ``probe``
        (``light_headers.heavy_only``), then kept under ``<cache>/light``; None where the preprocessor failed (the
        file then compiles as written)."""
        flags, key = self._key(command, view, probe.text)
        known = (str(self.builder.cache_dir), key)  # as stored in that cache (whose headers it was read from)
        if known in _HEAVY_ONLY:
            return _HEAVY_ONLY[known]
        stored = self.builder.cache_dir / "light" / f"{key}.json"
        additions: HeavyOnly | None = None
        try:
            data = json.loads(stored.read_text())
            additions = HeavyOnly(
                macros=frozenset(data["macros"]), names=frozenset(data["names"]), python_kept=data["python_kept"]
            )
        except (OSError, ValueError, KeyError, TypeError):
            additions = self._read_heavy_only(flags, probe, view)
            if additions is not None:
                fields = {"macros": sorted(additions.macros), "names": sorted(additions.names)}
                write_once(stored, json.dumps({**fields, "python_kept": additions.python_kept}), replace=True)
        _HEAVY_ONLY[known] = additions
        return additions

    def side_by_side(self, asks: Sequence[tuple[Sequence[str], light_headers.Probe]], view: WorkspaceHeaders) -> None:
        """Reads the guards of ``asks`` (a unit's command, its probe) side by side, where there are several: on a
        new cache each is a preprocessor run, all before the first compile."""
        if len(asks) < 2:
            return  # a single one is read where it is asked for
        with ThreadPoolExecutor(len(asks), thread_name_prefix="cudagym-guard") as pool:
            list(pool.map(lambda ask: self.heavy_only(*ask, view), asks))

    def torch_words(self, command: Sequence[str], source: str, view: WorkspaceHeaders) -> frozenset[str] | None:
        """The words of the torch headers ``source`` includes and its device unit (compiled by ``command``) leaves
        out, as nvcc's device pass reads its directives with the unit's flags (``split_errors.torch_words``): read
        once per toolchain, flags and directives, then kept under ``<cache>/split/words``; None where they could not
        be read."""
        includes = split_errors.directives(source)
        if not includes:
            return frozenset()
        flags, key = self._key(command, view, includes)
        known = (str(self.builder.cache_dir), key)
        with _TORCH_WORDS_LOCK:
            if known in _TORCH_WORDS:
                _TORCH_WORDS[known] = _TORCH_WORDS.pop(known)  # the most recently used last
                return _TORCH_WORDS[known]
        folder = self.builder.cache_dir / "split" / "words"
        stored = folder / f"{key}.json"
        words: frozenset[str] | None = None
        try:
            words = frozenset(json.loads(stored.read_text()))
            os.utime(stored)
        except (OSError, ValueError, TypeError):
            started = time.monotonic()
            preprocessed = self._preprocess(flags, includes, "probe.cu", view)
            if preprocessed is not None:
                words = split_errors.torch_words(preprocessed)
                write_once(stored, json.dumps(sorted(words)), replace=True)
                logger.info("torch's headers' words read in %.1f s (%d)", time.monotonic() - started, len(words))
                keep_newest(folder, KEPT_WORD_LISTS)
        with _TORCH_WORDS_LOCK:
            _TORCH_WORDS[known] = words
            while len(_TORCH_WORDS) > KEPT_WORD_LISTS // 4:
                del _TORCH_WORDS[next(iter(_TORCH_WORDS))]
        return words

    def _read_heavy_only(
        self, flags: list[str], probe: light_headers.Probe, view: WorkspaceHeaders
    ) -> HeavyOnly | None:
        started = time.monotonic()
        name = light_headers.PROBE_NAME if is_nvcc(flags[0]) else "heavy_probe.cpp"
        preprocessed = self._preprocess(flags, probe.text, name, view)
        if preprocessed is None:
            return None
        try:
            additions = light_headers.heavy_only(preprocessed, probe, name)
        except ValueError as exc:
            logger.warning("the light header check could not read the preprocessor's output: %s", exc)
            return None
        logger.info(
            "heavy torch headers read in %.1f s (%d macros, %d names)",
            time.monotonic() - started,
            len(additions.macros),
            len(additions.names),
        )
        return additions

    def _key(self, command: Sequence[str], view: WorkspaceHeaders, *extra: str) -> tuple[list[str], str]:
        """(a unit's ``command`` without its source and the module's name, the key of what the preprocessor reads
        with it: the toolchain, the portable flags, the workspace's headers and ``extra``)."""
        flags = [c for c in command[:-2] if not c.startswith("-DTORCH_EXTENSION_NAME=")]
        portable = [view.portable(c) for c in flags]
        toolchain = self.builder.toolchain
        key = content_hash(compiler_identity(flags[0]), toolchain.torch_version, *portable, view.digest, *extra)
        return flags, key[:32]

    def _preprocess(self, flags: list[str], text: str, name: str, view: WorkspaceHeaders) -> str | None:
        """The preprocessor's output (macro definitions kept) of ``text`` as the file ``name`` compiled with
        ``flags`` (for nvcc, its device pass), run in the compiler sandbox; None where it failed."""
        with tempfile.TemporaryDirectory(prefix="cudagym-preprocess-") as tmp:
            scratch = Path(tmp)
            probe, out = scratch / name, scratch / "probe.ii"
            probe.write_text(text)
            keep_macros = ["-Xcompiler", "-dD"] if is_nvcc(flags[0]) else ["-dD"]
            command = [*flags, *keep_macros, "-E", str(probe), "-o", str(out)]
            code, output = self.builder._run(command, scratch, scratch, readonly=[view.root])
            if code != 0 or not out.exists():
                logger.warning("torch's headers could not be preprocessed: %s", output[-2000:])
                return None
            return out.read_text(encoding="utf-8", errors="replace")


def write_once(path: Path, text: str, *, replace: bool = False) -> None:
    """``path`` holding ``text``, written through a temporary file (readers never see part of it); left as it is
    where it exists already, unless ``replace``."""
    if path.exists() and not replace:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(text)
    os.replace(tmp, path)


def keep_newest(folder: Path, count: int) -> None:
    """Removes all but the ``count`` most recently used files of ``folder`` (another process may remove them too)."""
    try:
        found = [(path.stat().st_mtime, path) for path in folder.iterdir()]
    except OSError:
        return
    for _, path in sorted(found, reverse=True)[count:]:
        path.unlink(missing_ok=True)
