"""Entry point of every evaluation child: ``python child.py {reference|candidate} FD``.

Run by path, so that this folder (and not the cudagym package) is what the child imports: the
candidate process holds only the harness, torch and the agent's code.
"""

from __future__ import annotations

import sys


def main() -> None:
    role, fd = sys.argv[1], int(sys.argv[2])
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
