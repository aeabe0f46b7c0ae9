"""Entry point of every evaluation child: ``python child.py {reference|candidate} FD LIMITS``.

Run by path, so that this folder (and not the cudagym package) is what the child imports: the
candidate process holds only the harness, torch and the agent's code.
"""

from __future__ import annotations

import json
import resource
import sys


def apply_limits(spec: str) -> None:
    """Sets the rlimits named in ``spec`` (JSON ``{"RLIMIT_CPU": n, ...}``) as soft and hard limits."""
    for name, value in json.loads(spec).items():
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
        except (ValueError, OSError):
            pass  # a hard limit already below ours stays as it is


def main() -> None:
    role, fd = sys.argv[1], int(sys.argv[2])
    if len(sys.argv) > 3:
        apply_limits(sys.argv[3])
    from common import Channel

    channel = Channel(fd)
    if role == "reference":
        from reference import ReferenceServer

        channel.send(ready=True)
        ReferenceServer(channel).serve()
    elif role == "candidate":
        import candidate

        candidate.main(channel)
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main()
