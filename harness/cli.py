"""The ``chaoslab`` command. Exit codes: 0 all good, 1 something failed, 2 bad input."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path

from harness import doctor
from harness.doctor import component_versions
from harness.environment import (
    BACKENDS,
    Environment,
    EnvironmentStatus,
    LocalOptions,
    NoEnvironment,
    attach,
    default_directory,
    open_environment,
)
from harness.environment.signals import stop_on_termination
from harness.errors import LabError
from harness.runner import ScenarioResult, run_scenario
from harness.scenario import load_scenario


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


def render_results(result: ScenarioResult) -> str:
    header = (
        f"{'runtime':<9} {'variant':<26} {'acked':>6} {'in_sink':>7} {'dup':>5} {'dup_keys':>8} "
        f"{'lost':>5} {'stale':>5} {'dlq':>4} {'ev/s':>7}  expectation"
    )
    lines = [f"scenario {result.scenario.name} (seed {result.scenario.seed})", header]
    for r in result.results:
        v = r.verdict
        verdict = "pass" if r.passed else "FAIL: " + "; ".join(r.failures)
        lines.append(
            f"{r.runtime:<9} {r.variant:<26} {v.acked:>6} {v.in_sink:>7} {v.duplicates:>5} "
            f"{v.duplicated_keys:>8} {v.lost:>5} {v.stale:>5} {v.dead_lettered:>4} "
            f"{r.events_per_s:>7.0f}  {verdict}"
        )
    return "\n".join(lines)


def _environment_for_run(args: argparse.Namespace, out: Path) -> tuple[Environment, bool]:
    """The environment named by --env (left running), or a new one in OUT/env (stopped after)."""
    if args.env is not None:
        return attach(args.env, progress=say), False
    return open_environment(args.backend, out / "env", progress=say), True


def cmd_run(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario).with_overrides(
        seed=args.seed,
        events=args.events,
        variants=_split(args.variants),
        runtimes=_split(args.runtime),
    )
    out = args.out or Path("runs") / f"{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    env, owned = _environment_for_run(args, out)
    with stop_on_termination(), ExitStack() as stack:
        if owned:
            say(f"starting a {args.backend} environment in {out / 'env'}")
            stack.enter_context(env)
        result = run_scenario(env, scenario, out, versions=component_versions(), progress=say)
    say("")
    say(render_results(result))
    say(f"\nresults: {out / 'results.json'}")
    return 0 if result.passed else 1


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


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

    run = sub.add_parser("run", help="run a scenario: every variant, same workload, checked")
    run.add_argument("scenario", type=Path, help="a scenario file, e.g. scenarios/baseline.yaml")
    run.add_argument("--variants", help="comma-separated variants (labels or names) to run")
    run.add_argument("--runtime", help="comma-separated runtimes: listener, spark")
    run.add_argument("--seed", type=int, help="override the scenario's seed")
    run.add_argument("--events", type=int, help="override the number of events")
    run.add_argument("--out", type=Path, help="run directory (default: runs/NAME-TIMESTAMP)")
    run.add_argument("--env", type=Path, help="use the environment running in this directory")
    run.add_argument("--backend", choices=BACKENDS, default="local")
    run.set_defaults(handler=cmd_run)

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
