"""The control block both sides of a handshake map (cudagym/harness/handshake.py), and the sampler's attribution of
code to what maps it (cudagym/harness/sampler.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cudagym.harness import handshake
from cudagym.harness.handshake import DESCRIBED, GO, ControlBlock, futex_wait, futex_wake
from cudagym.harness.sampler import category, function_name, is_glue


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


# demangled names as nm -C prints them for libtorch_cpu
LOOP = (
    "void c10::function_ref<void (char**, long const*, long, long)>::callback_fn<at::native::AVX2::VectorizedLoop2d<"
    "at::native::(anonymous namespace)::clamp_min_scalar_kernel_impl(at::TensorIteratorBase&, c10::Scalar const&)::"
    "{lambda()#1}::operator()() const::{lambda(float)#1}> >(long, char**, long const*, long, long)"
)
BOXED_CALL = (
    "std::_Function_handler<void (std::vector<c10::IValue, std::allocator<c10::IValue> >&), torch::jit::(anonymous "
    "namespace)::createOperatorFromC10(c10::OperatorHandle const&)::{lambda(std::vector<c10::IValue, std::allocator"
    "<c10::IValue> >&)#1}>::_M_invoke(std::_Any_data const&, std::vector<c10::IValue, std::allocator<c10::IValue> >&)"
)


@pytest.mark.parametrize(
    ("name", "glue"),
    [
        # the per-call path every binding takes into torch: dispatcher, wrappers, tensor metadata, boxing
        ("at::_ops::empty_like::call(at::Tensor const&, std::optional<c10::ScalarType>)", True),
        ("float* at::TensorBase::data_ptr<float>() const", True),
        ("at::detail::computeStorageNbytes(c10::ArrayRef<long>, c10::ArrayRef<long>, unsigned long)", True),
        ("at::(anonymous namespace)::(anonymous namespace)::wrapper_CPU_clamp_min(at::Tensor const&)", True),
        ("at::impl::PythonTorchFunctionTLS::exchange_skip_next(bool)", True),
        (BOXED_CALL, True),
        # where torch computes: vectorised loops (reached through a thunk), kernels, ops' own bodies
        (LOOP, False),
        ("void at::native::AVX2::vectorized_loop<float>(char**, long)", False),
        ("at::native::(anonymous namespace)::cpu_serial_kernel<X>(int)", False),
        ("at::native::relu(at::Tensor const&)", False),
        ("at::native::structured_clamp_min_out::impl(at::Tensor const&, c10::Scalar const&, at::Tensor const&)", False),
        ("some_unknown_symbol", False),
    ],
)
def test_torch_glue_is_told_from_torch_computing(name: str, glue: bool) -> None:
    assert is_glue(name) == glue


def test_a_function_name_loses_its_return_type_template_arguments_and_parameters() -> None:
    assert function_name("float* at::TensorBase::data_ptr<float>() const") == ("at::TensorBase::data_ptr", "float")
    assert function_name(LOOP)[0] == "c10::function_ref::callback_fn"
    assert "VectorizedLoop2d" in function_name(LOOP)[1]


def test_a_cpu_candidate_sleeps_on_the_go_word_until_woken_or_it_changes(tmp_path: Path) -> None:
    import threading
    import time

    block = ControlBlock(str(tmp_path / "control"), create=True)
    address = block.host_address + 8 * GO
    start = time.monotonic()
    futex_wait(address, 1, 5.0)  # the word holds 0, not 1: returns at once
    assert time.monotonic() - start < 1.0
    start = time.monotonic()
    futex_wait(address, 0, 0.05)  # nothing wakes it: the timeout does
    assert 0.04 <= time.monotonic() - start < 1.0
    woken = threading.Event()

    def sleeper() -> None:
        futex_wait(address, 0, 10.0)
        woken.set()

    thread = threading.Thread(target=sleeper)
    thread.start()
    time.sleep(0.1)
    block.words[GO] = 7
    futex_wake(address)
    assert woken.wait(2.0)
    thread.join()
    block.close()
