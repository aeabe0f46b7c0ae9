"""verifiers' taskset id for cudagym: ``vf-eval cudagym-verifiers`` (verifiers imports a taskset id as a top-level
module, ``-`` read as ``_``). Everything is in ``cudagym.integrations.verifiers``."""

from cudagym.integrations.verifiers import *  # noqa: F403 (the plug's public names are the taskset's)
from cudagym.integrations.verifiers import __all__ as __all__
