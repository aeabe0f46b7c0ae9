"""Plugs into the trainers and evaluation frameworks labs use, each behind its own extra.

* ``cudagym.integrations.trl``: TRL's ``GRPOTrainer(environment_factory=...)`` (``pip install 'cudagym[trl]'``).
* ``cudagym.integrations.verifiers``: a verifiers v1 taskset and env, cudagym's tools served through a
  verifiers toolset (``pip install 'cudagym[verifiers]'``; ``vf-eval cudagym-verifiers``).
"""
