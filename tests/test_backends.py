"""The toolchain's CUDA installation (``cudagym.backends``): found beside nvcc, or where nvcc is a wrapper script
elsewhere (``/usr/local/bin/nvcc`` running ``/usr/local/cuda-13.0/bin/nvcc``), where nvcc itself says it is."""

from __future__ import annotations

import stat
from pathlib import Path

from cudagym.backends import _cuda_home_of


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_installation_beside_nvcc_is_taken_without_running_it(tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime.h").write_text("")
    ran = tmp_path / "ran"
    nvcc = _script(home / "bin" / "nvcc", f"#!/bin/sh\ntouch {ran}\n")
    assert _cuda_home_of(str(nvcc)) == str(home) and not ran.exists()


def test_a_wrapper_script_elsewhere_leads_to_the_installation_nvcc_names(tmp_path: Path) -> None:
    home = tmp_path / "cuda-13.0"
    wrapper = _script(tmp_path / "local" / "bin" / "nvcc", f"#!/bin/sh\necho '#$ _HERE_={home}/bin' >&2\n")
    assert _cuda_home_of(str(wrapper)) == str(home)


def test_an_nvcc_that_names_nothing_leaves_the_folder_above_it(tmp_path: Path) -> None:
    silent = _script(tmp_path / "opt" / "bin" / "nvcc", "#!/bin/sh\nexit 1\n")
    assert _cuda_home_of(str(silent)) == str((tmp_path / "opt").resolve())
