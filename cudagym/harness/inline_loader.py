"""The candidate's ``torch.utils.cpp_extension.load_inline`` and ``load``: extensions built by the trusted builder.

A single-file solution (KernelBench's format) builds its kernels with ``load_inline`` when ``model_new.py`` is
imported. In a candidate process those two functions are replaced before the solution runs: a call becomes a
request (``inline_request.py``) that the trusted builder builds in the compiler sandbox with cudagym's object cache,
precompiled header and ccache; the call then imports the library it was given. Nothing is compiled in the candidate
and nothing is looked up in a folder the candidate can write: what a call gets depends only on its own request.

* At compile (the ``import`` job) every request goes to the trusted side over the private channel and the answer
  comes back on stdin (``artifact`` or ``error``).
* In later stages the job carries the builds of that compile (request key -> library); a call whose request was not
  built then fails with a message (its sources or flags differ from what was compiled).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from .inline_request import function_list, request_key, string_list

Ask = Callable[[str, dict[str, Any]], dict[str, Any]]
CPP_EXTENSION = "torch.utils.cpp_extension"


class _PatchOnImport(importlib.abc.MetaPathFinder):
    """Finds ``torch.utils.cpp_extension`` through the other finders and patches the module once it has run."""

    def __init__(self, patch: Callable[[Any], None]) -> None:
        self.patch = patch

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != CPP_EXTENSION:
            return None
        sys.meta_path.remove(self)  # once: the other finders find it, and later imports find it in sys.modules
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        run, patch = spec.loader.exec_module, self.patch

        def exec_module(module: Any) -> None:
            run(module)
            patch(module)

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def ask_over_channel(channel: Any) -> Ask:
    """Sends a request to the trusted side (``stage: build``) and reads its answer, one line of stdin."""

    def ask(key: str, request: dict[str, Any]) -> dict[str, Any]:
        channel.send(stage="build", key=key, request=request)
        line = sys.stdin.readline()
        try:
            answer = json.loads(line) if line else {}
        except json.JSONDecodeError:
            answer = {}
        return answer if isinstance(answer, dict) else {}

    return ask


class InlineLoader:
    """Serves ``load_inline``/``load`` calls from trusted builds: by asking (compile) or from ``builds`` (later)."""

    def __init__(self, builds: dict[str, str] | None = None, ask: Ask | None = None) -> None:
        # builds None (and no ``ask``): a workspace-layout solution, whose kernels are built from its files
        self.workspace_layout = builds is None and ask is None
        self.builds = dict(builds or {})
        self.ask = ask

    def install(self) -> None:
        """Replaces torch's loaders (the module attributes every ``from ... import load_inline`` reads): at once where
        ``torch.utils.cpp_extension`` is imported already, else when it is first imported (most solutions never
        import it, and its import costs a stage a tenth of a second)."""
        module = sys.modules.get(CPP_EXTENSION)
        if module is not None:
            self._patch(module)
        else:
            sys.meta_path.insert(0, _PatchOnImport(self._patch))

    def _patch(self, module: Any) -> None:
        module.load_inline = self.load_inline
        module.load = self.load

    def load_inline(
        self,
        name: str,
        cpp_sources: Any,
        cuda_sources: Any = None,
        sycl_sources: Any = None,
        functions: Any = None,
        extra_cflags: Any = None,
        extra_cuda_cflags: Any = None,
        extra_sycl_cflags: Any = None,
        extra_ldflags: Any = None,
        extra_include_paths: Any = None,
        build_directory: Any = None,
        verbose: bool = False,
        with_cuda: bool | None = None,
        with_sycl: bool | None = None,
        is_python_module: bool = True,
        with_pytorch_error_handling: bool = True,
        keep_intermediates: bool = True,
        use_pch: bool = False,
        no_implicit_headers: bool = False,
    ) -> Any:
        """torch's ``load_inline``, built by the trusted builder (``build_directory``, ``verbose``, ``use_pch``
        and ``keep_intermediates`` do not change what is built and are ignored)."""
        if sycl_sources or extra_sycl_cflags or with_sycl:
            raise ValueError("load_inline: SYCL sources are not supported here")
        request = {
            "loader": "load_inline",
            "name": str(name),
            "cpp_sources": string_list(cpp_sources, "cpp_sources"),
            "cuda_sources": string_list(cuda_sources, "cuda_sources"),
            "functions": function_list(functions),
            "with_pytorch_error_handling": bool(with_pytorch_error_handling),
            "no_implicit_headers": bool(no_implicit_headers),
            **self._flags(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths),
        }
        request["with_cuda"] = bool(request["cuda_sources"]) if with_cuda is None else bool(with_cuda)
        return self._obtain(request, is_python_module)

    def load(
        self,
        name: str,
        sources: Any,
        extra_cflags: Any = None,
        extra_cuda_cflags: Any = None,
        extra_sycl_cflags: Any = None,
        extra_ldflags: Any = None,
        extra_include_paths: Any = None,
        build_directory: Any = None,
        verbose: bool = False,
        with_cuda: bool | None = None,
        with_sycl: bool | None = None,
        is_python_module: bool = True,
        is_standalone: bool = False,
        keep_intermediates: bool = True,
    ) -> Any:
        """torch's ``load``: the files' text travels with the request (read here, relative to the workspace)."""
        if extra_sycl_cflags or with_sycl or is_standalone:
            raise ValueError("load: SYCL sources and standalone executables are not supported here")
        files = []
        for path in string_list(sources, "sources"):
            with open(path, encoding="utf-8") as f:
                files.append([os.path.basename(path), f.read()])
        request = {
            "loader": "load",
            "name": str(name),
            "sources": files,
            **self._flags(extra_cflags, extra_cuda_cflags, extra_ldflags, extra_include_paths),
        }
        cuda = any(f[0].endswith((".cu", ".cuh")) for f in files)
        request["with_cuda"] = cuda if with_cuda is None else bool(with_cuda)
        return self._obtain(request, is_python_module)

    @staticmethod
    def _flags(cflags: Any, cuda_cflags: Any, ldflags: Any, include_paths: Any) -> dict[str, list[str]]:
        return {
            "extra_cflags": [f.strip() for f in string_list(cflags, "extra_cflags")],
            "extra_cuda_cflags": [f.strip() for f in string_list(cuda_cflags, "extra_cuda_cflags")],
            "extra_ldflags": [f.strip() for f in string_list(ldflags, "extra_ldflags")],
            "extra_include_paths": [f.strip() for f in string_list(include_paths, "extra_include_paths")],
        }

    def _obtain(self, request: dict[str, Any], is_python_module: bool) -> Any:
        """The trusted build of ``request``, imported (a Python module) or loaded into torch.ops (a library)."""
        key = request_key(request)
        call = f"{request['loader']}(name={request['name']!r})"
        path = self.builds.get(key)
        if path is None and self.ask is not None:
            answer = self.ask(key, request)
            if answer.get("error") or not answer.get("artifact"):
                raise ImportError(f"{call} failed to build: {answer.get('error') or 'no answer from the builder'}")
            path = self.builds[key] = str(answer["artifact"])
        if path is None and self.workspace_layout:
            raise ImportError(
                f"{call}: load_inline and load are served for single-file solutions (model_new.py alone); in the "
                "workspace layout put the kernels in the kernel files, which compile builds into cuda_extension"
            )
        if path is None:
            raise ImportError(
                f"{call}: its sources or flags differ from those built at compile (they must not depend on anything "
                "that changes between runs); call compile again"
            )
        if not is_python_module:
            import torch

            torch.ops.load_library(path)
            return path
        spec = importlib.util.spec_from_file_location(request["name"], path)
        if spec is None or spec.loader is None:
            raise ImportError(f"{call}: cannot load the built extension")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
