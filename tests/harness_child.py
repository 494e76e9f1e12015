"""A stand-in harness for the supervision tests: starts an environment, reports its servers'
PIDs on stdout, then waits for stdin to close (or for a signal, or SIGKILL)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.environment.backends import open_environment
from tests.support import server_handles


def main(directory: str, backend: str = "local") -> None:
    with open_environment(backend, Path(directory)) as env:
        pids = {name: h.pid for name, h in server_handles(env.directory).items()}
        print(json.dumps(pids), flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main(*sys.argv[1:])
