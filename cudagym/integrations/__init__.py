"""Plugs into the trainers and evaluation frameworks labs use, each behind its own extra.

* ``cudagym.integrations.trl``: TRL's ``GRPOTrainer(environment_factory=...)`` (``pip install 'cudagym[trl]'``).
"""
