"""Sessions sharing the pool's real evaluators: each gets its own results, a broken evaluator is replaced, and the
pool's results are a local evaluator's.

One evaluator serves a task for every session; what it keeps between stages must not carry one workspace's state
into another's results (the failure memo, the fixed files found changed, the static findings).
"""

from __future__ import annotations

import os
import signal

from pool_testing import CPU, MachinePool, solution_workspace

from cudagym.eval_config import EvalConfig
from cudagym.evaluator import Evaluator, LocalEvaluator
from cudagym.pool import EvaluationPool, PoolEvaluator, PoolLimits
from cudagym.results import Status, SubmitResult, VerifyResult
from cudagym.tasks import Task


def test_two_sessions_on_one_task_get_their_own_results(
    machine: MachinePool, small_relu: Task, pool_config: EvalConfig
) -> None:
    right, wrong = solution_workspace(small_relu), solution_workspace(small_relu, wrong=True)
    alice = PoolEvaluator(machine.pool, small_relu, CPU, pool_config)
    bob = PoolEvaluator(machine.pool, small_relu, CPU, pool_config)
    try:
        before = len(machine.made)
        (wrong.path / "model.py").write_text((wrong.path / "model.py").read_text() + "\n# changed\n")
        # one at a time, alternating, so that the task's one evaluator serves both sessions in turn
        bob_first = bob.verify(wrong)  # finds model.py changed and restores it
        alice_first = alice.verify(right)
        bob_second = bob.verify(wrong)
        alice_submit = alice.submit(right)
        bob_submit = bob.submit(wrong)
        assert len(machine.made) - before <= 1, "one task's sessions, one at a time, did not share an evaluator"
    finally:
        right.remove()
        wrong.remove()
    assert isinstance(bob_first, VerifyResult) and bob_first.status is Status.INTEGRITY, bob_first
    assert "model.py" in bob_first.message
    assert isinstance(alice_first, VerifyResult) and alice_first.status is Status.OK, alice_first
    assert bob_second.status is Status.MISMATCH and not bob_second.checks[0].passed, bob_second
    assert isinstance(alice_submit, SubmitResult) and alice_submit.tier >= 1 and alice_submit.correct, alice_submit
    assert isinstance(bob_submit, SubmitResult) and bob_submit.tier == -1 and not bob_submit.correct, bob_submit
    findings = {f.check: f for f in alice_submit.integrity}
    assert findings["fixed_files_unchanged"].passed, "bob's changed model.py showed in alice's submit"
    assert bob_submit.verify is not None and bob_submit.verify.status is Status.MISMATCH


def test_the_pools_results_are_a_local_evaluators(
    machine: MachinePool, small_relu: Task, pool_config: EvalConfig
) -> None:
    pooled_ws, local_ws = solution_workspace(small_relu), solution_workspace(small_relu)
    local = LocalEvaluator(small_relu, CPU, pool_config, cache_dir=machine.pool.cache_dir)
    try:
        pooled = PoolEvaluator(machine.pool, small_relu, CPU, pool_config)
        compiled = (pooled.compile(pooled_ws), local.compile(local_ws))
        submitted = (pooled.submit(pooled_ws), local.submit(local_ws))
    finally:
        local.close()
        pooled_ws.remove()
        local_ws.remove()
    assert compiled[0].ok and compiled[1].ok and compiled[0].build_hash == compiled[1].build_hash
    via_pool, alone = submitted
    assert (via_pool.status, via_pool.tier, via_pool.compiled, via_pool.correct) == (
        alone.status,
        alone.tier,
        alone.compiled,
        alone.correct,
    ), (via_pool, alone)
    assert [f.check for f in via_pool.integrity] == [f.check for f in alone.integrity]
    assert via_pool.speedup_eager is not None and alone.speedup_eager is not None


class ReferenceKiller(LocalEvaluator):
    """A real evaluator whose reference process is killed (SIGKILL) as its first candidate job is being made: the
    middle of a verify, after the reference served the stage's inputs."""

    armed = True

    def _job(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        if ReferenceKiller.armed:
            ReferenceKiller.armed = False
            os.kill(self.reference().child.proc.pid, signal.SIGKILL)
        return super()._job(*args, **kwargs)


def test_a_killed_reference_process_gives_its_job_a_harness_error_and_a_new_evaluator(
    cache_dir, small_relu: Task, pool_config: EvalConfig
) -> None:
    made: list[Evaluator] = []

    def make(task: Task, config: EvalConfig) -> Evaluator:
        made.append(ReferenceKiller(task, CPU, config, cache_dir=cache_dir))
        return made[-1]

    pool = EvaluationPool(CPU, cache_dir=cache_dir, limits=PoolLimits(max_evaluators=1), make_evaluator=make)
    workspace = solution_workspace(small_relu)
    try:
        session = PoolEvaluator(pool, small_relu, CPU, pool_config)
        killed = session.verify(workspace)
        after = session.verify(workspace)
        stats = pool.stats()
    finally:
        pool.close()
        workspace.remove()
    assert isinstance(killed, VerifyResult) and killed.status is Status.HARNESS_ERROR, killed
    assert "reference" in killed.message, killed.message
    assert after.status is Status.OK, after
    assert len(made) == 2 and stats.evaluators.retired == 1 and stats.failed == 1
