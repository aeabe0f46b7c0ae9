"""The evaluator's judgements on what the trusted side reported (cudagym/stage_judgement.py)."""

from __future__ import annotations

from cudagym.harness.protocol import Timed
from cudagym.results import ProfileResult, Stage, Status
from cudagym.stage_judgement import calibration_problem, judge_baselines, miscalibrated


def test_a_timing_whose_clock_ran_faster_than_calibrated_is_not_trusted() -> None:
    """A calibration taken beside another process's work takes off too much: the candidate would read faster than it
    is, and an honest kernel could even fail the speed-of-light bound. Such a figure is no figure."""
    why = calibration_problem(Timed(handshakes=40, clock_quickened=30))
    assert why is not None and "profile again" in why and "30 of 40" in why


def test_a_few_quick_handshakes_do_not_void_a_timing() -> None:
    assert calibration_problem(Timed(handshakes=40, clock_quickened=3)) is None
    assert calibration_problem(Timed(handshakes=40)) is None
    assert calibration_problem(Timed()) is None


def test_baselines_agreeing_with_eager_beside_the_candidate_are_fair() -> None:
    verdict = judge_baselines(1.0, 0.8, 0.01, [1.01, 0.99, 1.0, 1.0], cuda=True, clock_slowed=False)
    assert verdict.fair and not verdict.retime and verdict.eager_ms == 1.0


def test_a_slower_eager_beside_the_candidate_never_lowers_the_bar_on_cuda() -> None:
    """The candidate could slow eager down by running beside it: the cached (quiet) times stay, marked not fair."""
    verdict = judge_baselines(1.0, 0.8, 0.01, [2.0, 2.1, 1.9, 2.0], cuda=True, clock_slowed=False)
    assert not verdict.fair and verdict.eager_ms == 1.0 and verdict.compile_ms == 0.8


def test_a_faster_eager_beside_the_candidate_times_the_cache_again() -> None:
    verdict = judge_baselines(2.0, 1.6, 0.01, [1.0, 1.01, 0.99, 1.0], cuda=True, clock_slowed=False)
    assert verdict.retime


def test_a_refusal_for_a_disturbed_calibration_is_told_apart_from_other_results() -> None:
    """The pool retries a profile refused because its clock calibrated beside other work: the same quarter of the
    timed handshakes decides it as decided the refusal; an ok profile or another harness error is not one."""

    def result(status: Status, quickened: int) -> ProfileResult:
        return ProfileResult(Stage.PROFILE, status, "", clock={"clock_quickened": quickened, "handshakes": 20})

    assert miscalibrated(result(Status.HARNESS_ERROR, 6))
    assert not miscalibrated(result(Status.HARNESS_ERROR, 5))
    assert not miscalibrated(result(Status.OK, 20))
    assert not miscalibrated(ProfileResult(Stage.PROFILE, Status.HARNESS_ERROR, "the reference process died"))
    assert calibration_problem(Timed(clock_quickened=6, handshakes=20)) is not None
    assert calibration_problem(Timed(clock_quickened=5, handshakes=20)) is None
