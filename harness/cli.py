"""The ``chaoslab`` command. Exit codes: 0 all good, 1 something failed, 2 bad input."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness import doctor
from harness.environment import (
    BACKENDS,
    EnvironmentStatus,
    LocalOptions,
    NoEnvironment,
    attach,
    default_directory,
    open_environment,
)
from harness.environment.signals import stop_on_termination
from harness.errors import LabError


def say(message: str) -> None:
    print(message, flush=True)


def render_status(st: EnvironmentStatus) -> str:
    holder = "detached (stop with chaoslab down)" if st.detached else f"owned by PID {st.owner_pid}"
    lines = [
        f"environment {st.env_id} ({st.backend}) in {st.directory}, {holder}",
        f"  kafka bootstrap  {st.kafka_bootstrap}",
        f"  mongo uri        {st.mongo_uri}",
        f"  spark master     {st.spark_master}",
        "",
        f"  {'server':<13} {'pid':>7}  {'state':<7} {'address':<16} log",
    ]
    for s in st.servers:
        condition = "paused" if s.paused else "ready" if s.ready else "up" if s.alive else "DOWN"
        pid = str(s.pid) if s.pid else "-"
        lines.append(f"  {s.name:<13} {pid:>7}  {condition:<7} {s.address:<16} {s.log}")
    return "\n".join(lines)


def _options(args: argparse.Namespace) -> LocalOptions:
    return LocalOptions(spark_standalone=args.spark_standalone, spark_cores=args.spark_cores)


def cmd_up(args: argparse.Namespace) -> int:
    env = open_environment(args.backend, args.dir, _options(args), progress=say)
    say(f"starting the {args.backend} environment in {env.directory}")
    with stop_on_termination():
        env.start(detach=True)
    say("")
    say(render_status(env.status()))
    say(f"\nstop it with: chaoslab down --dir {env.directory}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    try:
        st = attach(args.dir).status()
    except NoEnvironment as exc:
        say(str(exc))
        return 1
    say(st.to_json() if args.json else render_status(st))
    return 0 if st.healthy else 1


def cmd_down(args: argparse.Namespace) -> int:
    try:
        env = attach(args.dir, progress=say)
    except NoEnvironment:
        say(f"nothing running in {Path(args.dir).resolve()}")
        return 0
    env.stop()
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    diagnosis = doctor.diagnose()
    say(diagnosis.to_json() if args.json else doctor.render(diagnosis))
    return 0 if diagnosis.can_run("local") else 1


def cmd_demo(args: argparse.Namespace) -> int:
    """The lab's main job. For now: bring the environment up, show it, take it down."""
    with open_environment("local", args.dir, progress=say) as env:
        say("")
        say(render_status(env.status()))
        say("")
    return 0


def _add_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dir",
        type=Path,
        default=default_directory(),
        help="the environment's directory (default: $CHAOSLAB_DIR or .chaoslab/env)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaoslab",
        description="Chaos-testing lab for exactly-once ingestion from Kafka into MongoDB.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="start an environment and leave it running")
    up.add_argument("--backend", choices=BACKENDS, default="local")
    _add_dir(up)
    up.add_argument(
        "--spark-standalone",
        action="store_true",
        help="also run a Spark master and worker as processes (default: local[N] sessions)",
    )
    up.add_argument("--spark-cores", type=int, default=2, metavar="N")
    up.set_defaults(handler=cmd_up)

    status = sub.add_parser("status", help="show what runs and whether it answers")
    _add_dir(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    down = sub.add_parser("down", help="stop the environment and everything it started")
    _add_dir(down)
    down.set_defaults(handler=cmd_down)

    doc = sub.add_parser("doctor", help="what this machine has; which backends can run here")
    doc.add_argument("--json", action="store_true")
    doc.set_defaults(handler=cmd_doctor)

    demo = sub.add_parser("demo", help="the lab's main job (what `make demo` runs)")
    _add_dir(demo)
    demo.set_defaults(handler=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except LabError as exc:
        print(f"chaoslab: {exc}", file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("chaoslab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
