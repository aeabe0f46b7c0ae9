"""Whose shortage a candidate's out-of-memory error was (``cudagym.device_memory``): the machine's when, with the
candidate gone, less than its allowance was free (other processes held the device); its own otherwise. The GPU
side (a co-tenant process that fills the device, a candidate that asks for too much) is
``tests/gpu/test_device_shortage.py``."""

from __future__ import annotations

from cudagym.device_memory import GIB, PROCESS_BYTES, DeviceReading, candidate_allowance, shortage

OOM = "CUDA fault while running ModelNew: CUDA out of memory. Tried to allocate 4.00 GiB"


def test_a_candidate_may_count_on_a_context_and_one_and_a_half_times_its_references_peak() -> None:
    assert candidate_allowance(None) == PROCESS_BYTES
    assert candidate_allowance(20 * GIB) == PROCESS_BYTES + 30 * GIB


def test_a_device_that_other_processes_filled_makes_the_shortage_the_machines() -> None:
    why = shortage(OOM, DeviceReading(2 * GIB, 80 * GIB), 20 * GIB)
    assert why is not None
    assert "outside the candidate" in why and "2.0 of 80 GiB free" in why and "31.0 GiB" in why


def test_a_large_candidate_whose_own_data_was_most_of_what_was_free_is_the_machines_shortage() -> None:
    # leaky_relu's case on an H100 beside other evaluators: the candidate held 30.6 GiB and asked for 2 more with 1.6
    # GiB free, so 32.2 GiB were free once it was gone. Its reference's peak was not logged; with a reference of 22
    # GiB (an honest candidate of the task needing up to 34 GiB) the shortage is the machine's
    assert shortage(OOM, DeviceReading(int(32.2 * GIB), 80 * GIB), 22 * GIB) is not None


def test_a_candidate_that_asked_more_than_a_device_with_room_gave_ran_out_on_its_own() -> None:
    # free memory beyond its allowance once it was gone: what it asked for was its own business
    assert shortage(OOM, DeviceReading(70 * GIB, 80 * GIB), 20 * GIB) is None
    assert shortage(OOM, DeviceReading(31 * GIB, 80 * GIB), 20 * GIB) is None  # exactly its allowance
    assert shortage(OOM, DeviceReading(60 * GIB, 80 * GIB), None) is None  # its reference's peak unknown: a context


def test_only_an_out_of_memory_error_read_on_a_device_that_answered_is_judged() -> None:
    # a kernel's illegal address on a full device is still the kernel's; an unreadable device leaves the error its own
    assert (
        shortage("CUDA fault while running ModelNew: an illegal memory access", DeviceReading(0, 80 * GIB), 0) is None
    )
    assert shortage(OOM, None, 20 * GIB) is None
