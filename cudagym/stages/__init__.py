"""The evaluator's stages, one module each: what :class:`~cudagym.evaluator.LocalEvaluator` runs for each call.

``LocalEvaluator`` (``cudagym/evaluator.py``) is the public face: it holds what the stages share (the task, the
reference process, the candidate pool, the builders, the caches, the device's slots) and hands itself to the
functions here, which keep no state of their own.

* ``compilation``: the compile gate, the workspace's build, a single-file ``model_new.py`` imported with its
  ``load_inline`` builds served (``CompileResult``);
* ``candidates``: what the candidate stages share: the prechecks, a candidate's job, its stage on the reference's
  clock, input sets drawn for untimed use, the result of a harness failure;
* ``verification``: verify, every output compared by the reference (``VerifyResult``);
* ``profiling``: profile on the trusted clock, with the roofline bound (``ProfileResult``);
* ``baselines``: eager and torch.compile times: cached, timed ahead, timed now, judged for a profile
  (``Baselines``, ``stage_judgement.BaselineVerdict``);
* ``preparation``: a task prepared ahead of its first cycle (its timeline in ``LocalEvaluator.ahead_marks``, why it
  stopped early in ``LocalEvaluator.ahead_error``);
* ``wrapped``: one untimed call of the candidate under a tool (Nsight Compute's report for ``profile(ncu=True)``);
* ``faults``: a CUDA fault a stage ran into, with compute-sanitizer's finding (``results.CudaFault``);
* ``submission``: compile, verify, profile in turn, the tier and the findings merged (``SubmitResult``).

They log to the ``cudagym.evaluator`` logger, as the evaluator did before it was split.
"""
