"""Benchmark (not a test): the containers backend's images, built cold and found cached, and its
``up``-to-ready beside the local backend's, measured in one run.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_containers.py

"Cold" is each image built again without the engine's layer cache (the base image's root
filesystem made by debootstrap again); "cached" is the lookup ``up`` makes when the image's
content hash is already a tag. Skipped, saying why, where no engine can run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from harness.environment.containers import images
from harness.environment.containers.engine import engine_for_building, engine_problem
from harness.environment.containers.environment import ContainersEnvironment
from harness.environment.local import LocalEnvironment


def quiet(_message: str) -> None:
    pass


def timed(action: object) -> float:
    start = time.monotonic()
    action()  # type: ignore[operator]
    return time.monotonic() - start


def main() -> None:
    problem = engine_problem()
    if problem:
        print(f"containers: skipped ({problem})")
        return
    with tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp:
        with engine_for_building(Path(tmp) / "build") as engine:
            print(f"containers: engine {engine.kind} at {engine.base_url}")
            cold = {
                "base (debootstrap + import)": timed(
                    lambda: images.build_base(engine, quiet, force=True)
                ),
                "deps (wheels, jars; no cache)": timed(
                    lambda: images.build_deps(engine, quiet, force=True)
                ),
                "lab (the lab's wheel; no cache)": timed(
                    lambda: images.build_lab(engine, quiet, force=True)
                ),
            }
            cached = timed(lambda: images.build_lab(engine, quiet))
        for what, took in cold.items():
            print(f"  image {what:<34} cold {took:6.1f} s")
        print(f"  all three, cached (the tag lookup `up` makes)  {cached:6.2f} s")
        for name, kind in (("containers", ContainersEnvironment), ("local", LocalEnvironment)):
            env = kind(Path(tmp) / name)
            ready = timed(env.start)
            down = timed(env.stop)
            print(f"  up-to-ready {name:<10} {ready:6.1f} s  (down {down:.1f} s)")


if __name__ == "__main__":
    main()
