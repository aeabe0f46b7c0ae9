"""The control block both sides of a handshake map (cudagym/harness/handshake.py), and the sampler's attribution of
code to what maps it (cudagym/harness/sampler.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.harness import handshake
from cudagym.harness.handshake import DESCRIBED, ControlBlock
from cudagym.harness.sampler import category


def test_a_description_goes_across_and_marks_its_handshake(tmp_path: Path) -> None:
    path = str(tmp_path / "control")
    clock_side = ControlBlock(path, create=True)
    candidate_side = ControlBlock(path)
    candidate_side.write_description(7, {"n": 7, "calls": [{"container": "Tensor", "items": []}]})
    assert clock_side.words[DESCRIBED] == 7
    assert clock_side.read_description() == {"n": 7, "calls": [{"container": "Tensor", "items": []}]}
    with pytest.raises(FileExistsError):  # the clock makes a fresh block: never one the candidate prepared
        ControlBlock(path, create=True)


def test_a_garbled_or_oversized_description_reads_as_an_error(tmp_path: Path) -> None:
    block = ControlBlock(str(tmp_path / "control"), create=True)
    block.write_description(1, {"n": 1, "calls": ["x" * handshake.CONTROL_BYTES]})
    assert block.read_description()["error"]["type"] == "DescriptionTooLarge"
    block.map[handshake.DESCRIPTION : handshake.DESCRIPTION + 5] = b"{oops"
    block.words[handshake.DESCRIPTION_BYTES] = 5
    assert block.read_description()["error"]["type"] == "BadDescription"
    block.words[handshake.DESCRIPTION_BYTES] = 10**9  # a length the candidate made up
    assert block.read_description()["error"]["type"] == "BadDescription"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/x/site-packages/torch/lib/libtorch_cpu.so", "library"),
        ("/opt/intel/lib/libmkl_core.so.2", "library"),
        ("/usr/lib/x86_64-linux-gnu/libc.so.6", "runtime"),
        ("/x/site-packages/torch/lib/libc10.so", "runtime"),
        ("/x/torch/lib/libgomp-a34b3233.so.1", "runtime"),
        ("/usr/bin/python3.11", "runtime"),
        ("[vdso]", "runtime"),
        ("", "runtime"),
        ("/root/.cache/cudagym/builds/ab12/cuda_extension.so", "own"),
    ],
)
def test_sampled_code_is_attributed_by_the_file_that_maps_it(path: str, kind: str) -> None:
    assert category(path) == kind
