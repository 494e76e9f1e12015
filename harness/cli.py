"""The ``chaoslab`` command. Exit codes: 0 all good, 1 something failed, 2 bad input."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TypeVar

from harness import paths
from harness.console import say
from harness.environment import doctor, jars, spark_cds
from harness.environment.backends import (
    DEFAULT,
    REGISTRY,
    Request,
    attach,
    choose,
    default_directory,
    get_backend,
    names,
)
from harness.environment.base import BackendAbilities, Environment, EnvironmentStatus, NoEnvironment
from harness.environment.doctor import component_versions
from harness.environment.servers import kafka as kafka_node
from harness.environment.signals import stop_on_termination, stops_unwrapped
from harness.errors import BadInput, LabError
from harness.explore import inputs as explore_inputs
from harness.explore import report as explore_report
from harness.explore.explorer import explore
from harness.explore.model import DEFAULT_STRATEGY, REPLAYS
from harness.notebooks import execute
from harness.paths import revision
from harness.pipeline.connect import worker as connect_worker
from harness.pipeline.runtimes import get_runtime
from harness.repair import add_repair_parser
from harness.report import (
    render_matrix_table,
    render_soak_table,
    render_table,
    write_matrix_report,
    write_report,
    write_soak_page,
)
from harness.results.model import RESULTS, ScenarioResult
from harness.results.soak import soak_cells
from harness.run import shards
from harness.run.loop import Progress
from harness.run.matrix import SECOND_ENV, Planned, RunOne, prefixed, run_on_environments
from harness.run.runner import run_scenario
from harness.scenario import CUTS, Scenario, load_scenario, runnable

# -- the environment ---------------------------------------------------------------------------


def render_status(st: EnvironmentStatus) -> str:
    holder = "detached (stop with chaoslab down)" if st.detached else f"owned by PID {st.owner_pid}"
    lines = [
        f"environment {st.env_id} ({st.backend}) in {st.directory}, {holder}",
        f"  kafka bootstrap  {st.kafka_bootstrap}",
        f"  mongo uri        {st.mongo_uri}",
        f"  spark master     {st.spark_master}",
        *([f"  postgres uri     {st.postgres_uri}"] if st.postgres_uri else []),
        "",
        f"  {'server':<14} {'pid':>7}  {'state':<7} {'address':<16} log",
    ]
    for s in st.servers:
        condition = "paused" if s.paused else "ready" if s.ready else "up" if s.alive else "DOWN"
        pid = str(s.pid) if s.pid else "-"
        lines.append(f"  {s.name:<14} {pid:>7}  {condition:<7} {s.address:<16} {s.log}")
    kafka = st.kafka
    if kafka is None:
        why = f": {st.kafka_error}" if st.kafka_error else ""
        lines += ["", f"  kafka cluster    does not answer{why}"]
        return "\n".join(lines)
    controller = f"node {kafka.controller}" if kafka.controller is not None else "none elected"
    lines += [
        "",
        f"  kafka brokers    {', '.join(map(str, kafka.brokers)) or 'none'} registered; "
        f"active controller: {controller}; {kafka.under_replicated} partitions under-replicated",
    ]
    for group, node in sorted(kafka.coordinators.items()):
        lines.append(f"  coordinator      node {node if node is not None else '?'}: group {group}")
    return "\n".join(lines)


def _request(args: argparse.Namespace) -> Request:
    """What the command line asks of an environment (the backend's record makes its options)."""
    return Request(
        backend=args.backend,
        spark_cores=getattr(args, "spark_cores", 2),
        spark_standalone=getattr(args, "spark_standalone", False),
        postgres=getattr(args, "postgres", False),
        kafka_bootstrap=args.kafka_bootstrap or "",
        mongo_uri=args.mongo_uri or "",
        spark_master=args.spark_master or "",
        postgres_uri=getattr(args, "postgres_uri", None) or "",
        running=getattr(args, "env", None) is not None,
    )


def cmd_up(args: argparse.Namespace) -> int:
    if args.dry_run or args.images != "lab":
        backend = get_backend(args.backend)
        if not backend.builds_images:
            builders = ", ".join(b.name for b in REGISTRY.values() if b.builds_images)
            raise BadInput(f"--images and --dry-run are for --backend {builders}")
        if args.dry_run:
            print(backend.load().official_topology(args.images, args.dir or default_directory()))
            return 0
        raise BadInput(
            "--images official: this version renders the upstream images' topology (see it "
            "with --dry-run) but does not start it - the project's machines reach no registry "
            "to try it on; use the lab's images (the default)"
        )
    backend, options = choose(_request(args))
    env = backend.open(args.dir, options, progress=say)
    say(f"starting the {backend.name} environment in {env.directory}")
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


def cmd_fetch(args: argparse.Namespace) -> int:
    """Fetch the Java jars the lab runs (Apache Kafka's broker, Spark's Kafka connector,
    MongoDB's Spark connector) with Maven, once."""
    for jar_set in jars.every_set():
        jars.fetch(jar_set, progress=say)
        say(f"{jar_set.name} {jar_set.version}: {len(jar_set.jars())} jars in {jar_set.directory}")
    for archive in (spark_cds.DRIVER, kafka_node.CLASS_DATA, connect_worker.CLASS_DATA):
        archive.build(progress=say)  # after the jars: a no-op once built
    for example in jars.EXAMPLES:
        jars.build_example(example, progress=say)
    return 0


def cmd_images(args: argparse.Namespace) -> int:
    """Build the containers backend's images now (``up`` builds what is missing anyway)."""
    for backend in (b for b in REGISTRY.values() if b.builds_images):
        module = backend.load()
        problem, _ = module.engine_check()
        if problem:
            say(f"no images built: the {backend.name} backend cannot run here ({problem})")
            continue  # nothing to build for; doctor says what is missing
        tag = module.build_images(paths.project_root() / ".chaoslab" / "images", say)
        say(f"the {backend.name} backend's images are ready: {tag}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    diagnosis = doctor.diagnose()
    say(diagnosis.to_json() if args.json else doctor.render(diagnosis))
    return 0 if diagnosis.can_run(DEFAULT) else 1


# -- scenarios ---------------------------------------------------------------------------------


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _abilities(args: argparse.Namespace) -> BackendAbilities:
    """What the environment the command line names can do (--env: the running one's)."""
    if args.env is not None:
        return attach(args.env).abilities
    return choose(_request(args))[0].abilities


T = TypeVar("T")
R = TypeVar("R")


def _every(items: Sequence[T], do: Callable[[T], R]) -> list[R]:
    """``do`` of each item, or the problems of all of them at once (bad input is named whole)."""
    done, problems = [], []
    for item in items:
        try:
            done.append(do(item))
        except BadInput as exc:
            problems.append(str(exc))
    if problems:  # a command-line override's problem is every file's: named once
        raise BadInput("\n".join(dict.fromkeys(ln for p in problems for ln in p.splitlines())))
    return done


def _parse_all(files: Sequence[Path]) -> list[Scenario]:
    """Every file parsed, once."""
    return _every(files, lambda path: load_scenario(paths.find_scenario(path)))


def _prepare(args: argparse.Namespace, parsed: Scenario, abilities: BackendAbilities) -> Scenario:
    """A scenario with the command line's overrides, refused if the backend cannot run it."""
    return _checked(_overridden(args, parsed), abilities)


def _overridden(args: argparse.Namespace, parsed: Scenario) -> Scenario:
    """A scenario as ``--cut`` cuts it, with the command line's overrides over that, checked as
    its file is (nothing started)."""
    cut = parsed.cut(args.cut) if args.cut else parsed
    return cut.with_overrides(
        seed=args.seed,
        events=args.events,
        variants=_split(getattr(args, "variants", None)),
        runtimes=_split(args.runtime),
    )


def _checked(scenario: Scenario, abilities: BackendAbilities) -> Scenario:
    """``scenario``, refused if the backend cannot run it: Kafka Connect's own word on its
    connectors' configs is a JVM."""
    if any(get_runtime(r).connect for r, _spec in scenario.lanes):
        say(f"{scenario.name}: Kafka Connect validating the connector configs (a JVM, ~10 s)")
    for note in runnable(scenario, abilities):
        say(f"note: {scenario.path}: {note}")
    return scenario


def _environment_for_run(
    args: argparse.Namespace, out: Path, progress: Progress = say, name: str = "env"
) -> tuple[Environment, bool]:
    """The environment named by --env (left running), or a new one in OUT/NAME (stopped
    after)."""
    if args.env is not None:
        return attach(args.env, progress=progress), False
    backend, options = choose(_request(args))
    return backend.open(out / name, options, progress=progress), True


def _run_dir(args: argparse.Namespace, name: str) -> Path:
    """``--out``, or a new folder in the project's ``runs/`` (wherever the command runs)."""
    out: Path = args.out or paths.runs_dir() / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    return out.absolute()  # results.json names its files: for readers in any folder


def _scenario_backend(args: argparse.Namespace, scenarios: Sequence[Scenario]) -> None:
    """``--backend`` unless given: the one the scenarios name (``backend:``), else local."""
    if args.backend is not None or args.env is not None:
        return
    wanted = {s.backend for s in scenarios}
    args.backend = wanted.pop() if len(wanted) == 1 and None not in wanted else DEFAULT


# The options only matrix has, as run --repeat and demo (which run a matrix) leave them.
MATRIX_ONLY: dict[str, object] = {
    "keep_topics": False,
    "soak_page": None,
    "shard": None,
    "durations": None,
    "demo": False,
}


def repeat_matrix(args: argparse.Namespace) -> argparse.Namespace:
    """``run --repeat``'s arguments as the matrix's (every option matrix reads, set)."""
    more = {"scenarios": [args.scenario], "together": 1}
    return argparse.Namespace(**vars(args), **more, **MATRIX_ONLY)


def cmd_run(args: argparse.Namespace) -> int:
    parsed = _parse_all([args.scenario])
    if args.repeat != 1 or parsed[0].replays > 1:  # the matrix of one scenario's runs
        return cmd_matrix(repeat_matrix(args))
    _scenario_backend(args, parsed)
    abilities = _abilities(args)
    _say_cut(args, [_overridden(args, parsed[0])])
    scenario = _prepare(args, parsed[0], abilities)
    out = _run_dir(args, scenario.name)
    env, owned = _environment_for_run(args, out)
    with stop_on_termination(), ExitStack() as stack:
        if owned:
            say(f"starting a {env.backend} environment in {out / 'env'}")
            stack.enter_context(env)
            runnable(scenario, env.abilities)  # now that it runs: e.g. the nodes it found
        result = run_scenario(env, scenario, out, versions=component_versions(), progress=say)
    report = write_report(out)
    say("")
    say(render_table(result))
    say(f"\nreport: {report.markdown}\nresults: {out / RESULTS}")
    return 0 if result.passed else 1


def _repeated(scenarios: Sequence[Scenario], repeat: int) -> list[tuple[Scenario, str]]:
    """Each scenario ``repeat`` times, seeds ``seed``, ``seed + 1``, ...; without --repeat, one
    that asks for ``replays`` that many times with its own seed (a race's reproducer); with its
    run's folder name (the scenario's name, and the seed or the replay when repeated)."""
    runs: list[tuple[Scenario, str]] = []
    for s in scenarios:
        if repeat > 1:
            runs += [(s.with_overrides(seed=s.seed + k), f"{s.name}/seed-{s.seed + k}")
                     for k in range(repeat)]  # fmt: skip
        elif s.replays > 1:
            runs += [(s, f"{s.name}/replay-{k}") for k in range(1, s.replays + 1)]
        else:
            runs.append((s, s.name))
    return runs


def _matrix_options(args: argparse.Namespace) -> tuple[shards.Shard, list[str]]:
    """The matrix's own options: its shard, and their problems ([] if none)."""
    problems = [
        f"--{option} must be >= 1, got {getattr(args, option)}"
        for option in ("repeat", "together")
        if getattr(args, option) < 1
    ]
    shard = shards.Shard()
    if args.shard is not None:
        try:
            shard = shards.Shard.parse(args.shard)
        except BadInput as exc:
            problems.append(str(exc))
    for option, path in (("--durations", args.durations), ("--soak-page", args.soak_page)):
        if path is not None and path.is_dir():
            problems.append(f"{option}: {path} is a directory, not a file")
    if args.durations is not None and not args.durations.parent.is_dir():
        problems.append(f"--durations: no folder {args.durations.parent} to write it in")
    # Read now, not after the runs: --shard splits by the library's times, and --durations adds
    # to the file it names (an unreadable one would end a long matrix in a traceback).
    read: list[Path | None] = [None] if args.shard is not None else []
    if args.durations is not None and args.durations.is_file():
        read.append(args.durations)
    for path in read:
        try:
            shards.load_durations(path)
        except BadInput as exc:
            problems.append(str(exc))
    return shard, problems


def cmd_matrix(args: argparse.Namespace) -> int:
    files = args.scenarios or paths.library()
    # Its own options and the files as read are refused first, together: checking what the
    # scenarios ask of the backend may start a JVM per Kafka Connect scenario (~10 s each).
    shard, problems = _matrix_options(args)
    if not files:
        problems.append(f"no scenarios given and none in {paths.scenarios_dir()}")
    abilities: BackendAbilities | None = None  # known once every file is read
    try:
        parsed = _parse_all(files)
        cuts = _demo_cuts(parsed) if args.demo else parsed  # each cut by _overridden
        overridden = _every(cuts, lambda s: _overridden(args, s))
        _scenario_backend(args, overridden)
        abilities = _abilities(args)  # the backend's problems once, not once per file
    except BadInput as exc:
        problems.append(str(exc))
    if problems or abilities is None:
        raise BadInput("\n".join(problems))
    if args.demo:
        say(
            f"demo: {len(overridden)} of {len(parsed)} scenarios, each cut to the variants that "
            "show its difference (the whole library: chaoslab matrix, make library)"
        )
    split_of = tuple(s.name for s in overridden)
    if shard.count > 1:  # before the check: a shard validates only the connectors it runs
        overridden = _share(overridden, shard)
    _say_cut(args, overridden)
    scenarios = _every(overridden, lambda s: _checked(s, abilities))
    started = time.monotonic()
    runs = _repeated(scenarios, args.repeat)
    repeated = len(runs) > len(scenarios)  # some run more than once: their rates are judged
    out = _run_dir(args, "demo" if args.demo else "soak" if repeated else "matrix")
    out.mkdir(parents=True, exist_ok=True)
    _manifest(args, shard, [folder for _s, folder in runs], split_of).write(out)
    env, owned = _environment_for_run(args, out, progress=prefixed(say))
    with stop_on_termination(), ExitStack() as stack:
        if owned:
            say(f"starting a {env.backend} environment in {out / 'env'}")
            stack.enter_context(env)
            for scenario in scenarios:
                runnable(scenario, env.abilities)  # now that it runs: e.g. the nodes it found

        def runs_on(environment: Environment) -> RunOne:
            def run_one(
                scenario: Scenario, folder: str, progress: Progress, stop: threading.Event
            ) -> ScenarioResult:
                return run_scenario(
                    environment,
                    scenario,
                    out / folder,
                    versions=component_versions(),
                    progress=progress,
                    keep_topics=args.keep_topics,
                    stop=stop,
                )

            return run_one

        def second() -> Environment:
            other, _ = _environment_for_run(args, out, progress=prefixed(say), name=SECOND_ENV)
            say(f"starting a second {other.backend} environment in {out / SECOND_ENV}")
            return other

        results = run_on_environments(
            env,
            [Planned(s, folder, i) for i, (s, folder) in enumerate(runs, 1)],
            runs_on,
            together=args.together,
            progress=say,
            stack=stack,
            second=second if owned else None,
        )
    report = write_matrix_report(out, [out / folder for _s, folder in runs])
    wall = time.monotonic() - started
    if args.durations is not None:
        shards.record_durations(args.durations, _measured(results))
    say("")
    say(render_matrix_table(results))
    rates_hold = True
    if repeated:
        cells = soak_cells(results)
        rates_hold = all(r.passed for c in cells for r in c.rates)
        say("")
        say(render_soak_table(cells))
    if args.soak_page is not None:
        command = f"chaoslab matrix --repeat {args.repeat} --together {args.together}"
        page = write_soak_page(
            args.soak_page,
            [out / folder for _s, folder in runs],
            wall_s=wall,
            command=command,
            cores=os.cpu_count() or 1,
        )
        say(f"soak page: {page}")
    said = "" if rates_hold else "; an expectation over seeds DOES NOT HOLD"
    say(f"\n{len(runs)} scenario runs in {wall / 60:.1f} min{said}; report: {report.markdown}")
    return 0 if all(r.passed for r in results) and rates_hold else 1


def _demo_cuts(scenarios: Sequence[Scenario]) -> list[Scenario]:
    """The demo cuts of the scenarios that have one."""
    cuts = [s for s in scenarios if s.demo is not None]
    if not cuts:
        raise BadInput("--demo: none of the scenarios has a demo: section")
    return cuts


def _say_cut(args: argparse.Namespace, scenarios: Sequence[Scenario]) -> None:
    """Which cut each scenario runs at, before it runs (``--cut``; the demo says its own)."""
    if not args.cut or getattr(args, "demo", False):  # run has no --demo
        return
    for scenario in scenarios:
        section = scenario.section(args.cut)
        said = f"its {args.cut} cut ({section})" if section else f"whole (it has no {args.cut} cut)"
        say(f"{scenario.name}: {said}; the whole scenario: make library")


def _share(scenarios: list[Scenario], shard: shards.Shard) -> list[Scenario]:
    """The scenarios ``shard`` runs, balanced by their measured times; said before they run."""
    times = shards.load_durations()
    names = shards.share_of([s.name for s in scenarios], shard, times)
    mine = [s for s in scenarios if s.name in names]
    measured = sum(times.get(s.name, shards.UNTIMED_S) for s in mine)
    say(
        f"shard {shard}: {len(mine)} of {len(scenarios)} scenarios (~{measured / 60:.0f} min "
        f"measured): {', '.join(s.name for s in mine) or 'none'}"
    )
    return mine


def _manifest(
    args: argparse.Namespace, shard: shards.Shard, folders: list[str], split_of: tuple[str, ...]
) -> shards.Manifest:
    """What this matrix runs, and what every shard of one merge must share: the options, and
    the scenarios it was split from."""
    given = ("seed", "events", "runtime", "repeat", "backend", "cut")
    options = [(k, getattr(args, k)) for k in given]
    options.append(("demo", args.demo or None))
    return shards.Manifest(
        shard=str(shard),
        scenarios=tuple(folders),
        tree=shards.tree_id(),
        revision=revision(),
        options=tuple((k, str(v)) for k, v in options if v is not None),
        split_of=split_of,
    )


def _measured(results: Sequence[ScenarioResult]) -> dict[str, float]:
    """Each scenario's wall seconds (the mean over its seeds)."""
    walls: dict[str, list[float]] = {}
    for run in results:
        if run.seconds:
            walls.setdefault(run.name, []).append(run.seconds)
    return {name: sum(w) / len(w) for name, w in walls.items()}


# The demo runs the scenarios that keep to their own runs two at a time: one at a time, the
# library leaves the CPU mostly idle (a consumer's restart, a group's rejoin and a fault's
# window are mostly waiting; docs/performance.md).
DEMO_TOGETHER = 2


def cmd_demo(args: argparse.Namespace) -> int:
    """The lab's main job: the scenario library on a fresh local environment, then the table
    and the report."""
    return cmd_matrix(demo_matrix(args))


def demo_matrix(args: argparse.Namespace) -> argparse.Namespace:
    """The demo's arguments as the matrix's (every option matrix reads, set)."""
    defaults: dict[str, object] = {
        "scenarios": [],
        "runtime": None,
        "seed": None,
        "events": None,
        "env": None,
        "repeat": 1,
        "together": DEMO_TOGETHER,
        **MATRIX_ONLY,
        "demo": True,
        "cut": "demo",
    }
    external = {
        "kafka_bootstrap": None,
        "mongo_uri": None,
        "spark_master": None,
        "postgres_uri": None,
    }
    return argparse.Namespace(**vars(args), **defaults, **external, backend=DEFAULT)


def cmd_explore(args: argparse.Namespace) -> int:
    """Randomized fault schedules against each variant's promise; each violation shrunk."""
    args.backend = args.backend or DEFAULT
    out = _run_dir(args, f"explore-{args.seed}")
    plan = explore_inputs.plan(
        runtime=args.runtime,
        variants=args.variant or [],
        kinds=_split(args.faults),
        backend=_abilities(args),
        budget=args.budget,
        seed=args.seed,
        out=out,
        findings=args.findings,
        replays=args.replays,
        source=args.source,
        strategy=args.strategy,
    )
    explored, budget = plan.explored, plan.budget_s
    say(
        f"exploring {', '.join(map(str, explored.variants))} on {explored.runtime}"
        f"{' from PostgreSQL through Debezium' if explored.source != 'producer' else ''} for "
        f"{budget:.0f} s, seed {args.seed}, {plan.strategy} draws; fault kinds: "
        f"{', '.join(explored.kinds)}"
    )
    env, owned = _environment_for_run(args, out)
    stop = threading.Event()
    with stop_on_termination(), ExitStack() as stack:
        if owned:
            say(f"starting a {env.backend} environment in {out / 'env'}")
            stack.enter_context(env)
        state = explore(env, plan, progress=say, stop=stop)
    say("")
    for finding in state.findings:
        again = f" (runs {', '.join(map(str, finding.runs))}: one cause)" if finding.also else ""
        say(f"found-{finding.number}: {'; '.join(map(str, finding.violations))}{again}")
        say(f"  minimal: {finding.minimal.schedule()} ({finding.minimal.shape.events} events)")
        say(f"  reproduced {finding.reproduced} of {finding.replays} replays")
        say(f"  chaoslab run {finding.scenario_file}")
    if not state.findings:
        say(f"no variant broke its promise in {len(state.runs)} runs")
    say(f"report: {out / explore_report.PAGE}")
    return 1 if state.findings else 130 if state.interrupted else 0


def cmd_report(args: argparse.Namespace) -> int:
    """Write (again) the report of a run or matrix directory; or merge the directories of a
    matrix's shards into one report."""
    if len(args.directories) > 1:
        return _merge(args.directories, args.out)
    (directory,) = args.directories
    if (directory / RESULTS).exists():
        say(f"report: {write_report(directory).markdown}")
        return 0
    runs = _runs_in(directory)
    if not runs:
        raise BadInput(f"{directory} holds no results.json (run chaoslab run or matrix)")
    say(f"report: {write_matrix_report(directory, runs).markdown}")
    return 0


def _runs_in(directory: Path) -> list[Path]:
    """A matrix's runs, or a soak's (a folder per scenario, one per seed in it)."""
    found = [p.parent for p in directory.glob(f"*/{RESULTS}")]
    return _library_order(found or [p.parent for p in directory.glob(f"*/seed-*/{RESULTS}")])


def _merge(directories: Sequence[Path], out: Path | None) -> int:
    """The shards' directories as one matrix: one table, one report, one JUnit file."""
    problems = [f"{d}: no such directory" for d in directories if not d.is_dir()]
    found = []
    for directory in (d.absolute() for d in directories if d.is_dir()):
        try:
            found.append((directory, shards.Manifest.read(directory)))
        except BadInput as exc:
            problems.append(str(exc))
    problems += shards.merge_problems(found)
    if problems:
        raise BadInput("cannot merge these directories:\n" + "\n".join(problems))
    manifests = [(d, m) for d, m in found if m is not None]
    runs = _library_order([d / folder for d, m in manifests for folder in m.scenarios])
    merged = (out or paths.runs_dir() / f"merged-{time.strftime('%Y%m%d-%H%M%S')}").absolute()
    report = write_matrix_report(merged, runs)
    with report.markdown.open("a") as page:
        page.write("\n## Shards\n\n")
        for directory, manifest in sorted(
            manifests, key=lambda p: shards.Shard.parse(p[1].shard).index
        ):
            ran = ", ".join(manifest.scenarios) or "nothing"
            page.write(f"* shard {manifest.shard} ({directory}): {ran}\n")
    say(render_matrix_table(list(report.runs)))
    say(f"\nmerged {len(manifests)} shards, {len(runs)} scenario runs; report: {report.markdown}")
    return 0 if all(r.passed for r in report.runs) else 1  # a run without results fails


def _library_order(runs: Sequence[Path]) -> list[Path]:
    """Runs in the library's order (``paths.library_key``), then by seed."""

    def key(run: Path) -> tuple[tuple[bool, str], int]:
        seeded = run.name.startswith("seed-")
        name = run.parent.name if seeded else run.name
        seed = int(run.name.removeprefix("seed-")) if seeded else 0
        return (paths.library_key(name), seed)

    return sorted(runs, key=key)


def cmd_notebooks(args: argparse.Namespace) -> int:
    """Execute notebooks with papermill; fail when one's own expectations fail."""
    chosen = execute.find(args.names)
    parameters = execute.parse_parameters(args.parameter or [])
    if args.env is not None:
        parameters["env_dir"] = str(args.env.resolve())
    out = _run_dir(args, "notebooks")
    with stop_on_termination():
        results = execute.run_notebooks(chosen, out, parameters, progress=say)
    passed = sum(r.passed for r in results)
    say(f"\n{passed} of {len(results)} notebooks passed; executed copies in {out}")
    return 0 if passed == len(results) else 1


# -- the parser --------------------------------------------------------------------------------


def _add_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dir",
        type=Path,
        default=default_directory(),
        help="the environment's directory (default: $CHAOSLAB_DIR or the project's .chaoslab/env)",
    )


def _add_scenario_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--runtime", help="comma-separated runtimes to run: listener, spark")
    p.add_argument("--seed", type=int, help=f"override the seed of {what}")
    p.add_argument("--events", type=int, help=f"override the number of events of {what}")
    p.add_argument(
        "--out", type=Path, help="where results and the report go (default: the project's runs/)"
    )
    p.add_argument("--env", type=Path, help="use the environment running in this directory")
    p.add_argument(
        "--cut",
        choices=CUTS,
        help=f"run {what} at its cut, the variants, runtimes and events that still show its "
        "point, judged by the same expectations: demo (make demo's) or ci (make test's; the "
        "demo's where it has none); whole where it has none (default: whole)",
    )
    p.add_argument(
        "--backend",
        choices=names(),
        help="default: the scenario's own (`backend:` in its file), else local",
    )
    _add_external(p)


def _add_external(p: argparse.ArgumentParser) -> None:
    group = p.add_argument_group(
        "servers the lab did not start (the external backend; the lab starts only its fault "
        "proxy in front of them, and refuses faults that stop, kill or pause a server)"
    )
    group.add_argument("--kafka-bootstrap", metavar="HOST:PORT[,...]", help="an existing Kafka")
    group.add_argument(
        "--mongo-uri", metavar="URI", help="an existing MongoDB replica set (mongodb://...)"
    )
    group.add_argument(
        "--spark-master",
        metavar="spark://HOST:PORT",
        help="an existing Spark standalone master (its workers must see this machine's run "
        "directory); without it Spark runs in the driver",
    )
    group.add_argument(
        "--postgres-uri",
        metavar="URI",
        help="an existing PostgreSQL database for a CDC source (postgresql://USER@HOST:PORT/DB; "
        "checked at up for wal_level=logical, the REPLICATION privilege and free slots)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="chaoslab",
        description="Chaos-testing lab for exactly-once ingestion from Kafka into MongoDB.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = sub.add_parser("up", help="start an environment and leave it running")
    up.add_argument("--backend", choices=names(), default=DEFAULT)
    _add_dir(up)
    up.add_argument(
        "--images",
        choices=("lab", "official"),
        default="lab",
        help="containers: the lab's images, built here (default), or upstream ones "
        "(apache/kafka, mongo, apache/spark; rendered only, see --dry-run)",
    )
    up.add_argument(
        "--dry-run",
        action="store_true",
        help="containers: print the containers it would start (JSON) and start nothing",
    )
    up.add_argument(
        "--spark-standalone",
        action="store_true",
        help="also start the Spark standalone cluster (a master, two workers) now; otherwise it "
        "starts when a scenario first asks for it (pipeline.spark_cluster: standalone)",
    )
    up.add_argument(
        "--spark-cores", type=int, default=2, metavar="N", help="N of local[N] Spark sessions"
    )
    up.add_argument(
        "--postgres",
        action="store_true",
        help="local: also start PostgreSQL (logical decoding on) now; otherwise it starts when "
        "a run of a CDC source first asks for it",
    )
    _add_external(up)
    up.set_defaults(handler=cmd_up)

    status = sub.add_parser("status", help="show what runs and whether it answers")
    _add_dir(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(handler=cmd_status)

    down = sub.add_parser("down", help="stop the environment and everything it started")
    _add_dir(down)
    down.set_defaults(handler=cmd_down)

    fetch = sub.add_parser(
        "fetch",
        help="fetch Kafka's, Spark's Kafka connector's and MongoDB's Spark connector's jars "
        "with Maven, and build the Java example consumer (once; make runs it)",
    )
    fetch.set_defaults(handler=cmd_fetch)

    img = sub.add_parser(
        "images", help="build the containers backend's images now (once per change; make test)"
    )
    img.set_defaults(handler=cmd_images)

    doc = sub.add_parser("doctor", help="what this machine has; which backends can run here")
    doc.add_argument("--json", action="store_true")
    doc.set_defaults(handler=cmd_doctor)

    run = sub.add_parser("run", help="run a scenario: every variant, same workload, checked")
    run.add_argument(
        "scenario", type=Path, help="a library name (baseline) or a file (scenarios/baseline.yaml)"
    )
    run.add_argument("--variants", help="comma-separated variants (labels or names) to run")
    run.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run it with N seeds (its own and the N-1 after it), one after another, and judge "
        "its expectations over seeds (e.g. duplicates: '>0 in 80%%')",
    )
    _add_scenario_options(run, "the scenario")
    run.set_defaults(handler=cmd_run)

    matrix = sub.add_parser("matrix", help="run several scenarios (default: the library)")
    matrix.add_argument(
        "scenarios", nargs="*", type=Path, help="names or files (default: the whole library)"
    )
    _add_scenario_options(matrix, "every scenario")
    matrix.add_argument(
        "--keep-topics",
        action="store_true",
        help="keep each run's Kafka topics (default: deleted once judged, as they slow the "
        "broker's later runs; MongoDB databases are always kept)",
    )
    matrix.add_argument(
        "--repeat",
        type=int,
        default=1,
        metavar="N",
        help="run every scenario N times, with seeds SEED..SEED+N-1, and print how often each "
        "variant's expectations held (soak figures)",
    )
    matrix.add_argument(
        "--shard",
        metavar="K/N",
        help="run the K-th of N shares of the scenarios, balanced by their measured times "
        "(scenarios/durations.json); merge the shards with chaoslab report DIR...",
    )
    matrix.add_argument(
        "--durations",
        type=Path,
        metavar="FILE",
        help="write each scenario's measured wall time into FILE, which --shard balances by "
        "(make soak: scenarios/durations.json)",
    )
    matrix.add_argument(
        "--demo",
        action="store_true",
        help="each scenario's demo cut (its demo: section: the variants that show the "
        "difference, a smaller workload), and only the scenarios that have one (chaoslab demo)",
    )
    matrix.add_argument(
        "--soak-page",
        type=Path,
        metavar="FILE",
        help="also write the soak's table as a markdown page (make soak: docs/soak.md)",
    )
    matrix.add_argument(
        "--together",
        type=int,
        default=1,
        metavar="N",
        help="run up to N scenarios at once where their faults act on their own runs only "
        "(consumer crashes, the workload's own records, commit failures of their own groups, a "
        "Spark executor); those with faults on a server or link of the environment run one at a "
        "time, on an environment of their own: a second one beside the first (local backend), "
        "or first (default 1: each scenario has the "
        f"machine to itself; the demo uses {DEMO_TOGETHER})",
    )
    matrix.set_defaults(handler=cmd_matrix)

    demo = sub.add_parser(
        "demo",
        help="the lab's main job (`make demo`): each seed's headline incident, cut to a first "
        "look (the whole library: chaoslab matrix)",
    )
    demo.add_argument("--out", type=Path, help="directory (default: runs/demo-TIMESTAMP)")
    demo.set_defaults(handler=cmd_demo)

    ex = sub.add_parser(
        "explore", help="random fault schedules against each variant's promise; shrink what breaks"
    )
    ex.add_argument(
        "--variant",
        action="append",
        help="a variant to explore (repeat): a name, module:callable, or a scenario entry such "
        "as '{name: dedup-log, key: business}' (default: the built-ins that promise something)",
    )
    ex.add_argument("--runtime", default="listener", help="listener or spark (default: listener)")
    ex.add_argument("--budget", default="10m", help="the whole command's time: 600, 90s, 10m, 1h")
    ex.add_argument("--seed", type=int, default=1, help="draws the schedules (default: 1)")
    ex.add_argument("--faults", help="comma-separated fault kinds to draw from (default: all)")
    ex.add_argument(
        "--source",
        default="producer",
        help="where the records come from: producer, or debezium (PostgreSQL through Debezium, "
        "whose own faults are drawn too, and whose stage is held to at-least-once)",
    )
    ex.add_argument(
        "--strategy",
        default=DEFAULT_STRATEGY,
        help="how each run's schedule is drawn: guided (toward the fault targets, crash points "
        "and history conditions no run has reached yet), or random (from the seed alone: the "
        f"same seed, the same schedules) (default: {DEFAULT_STRATEGY})",
    )
    ex.add_argument(
        "--findings", type=int, help="stop after this many findings (default: use the budget)"
    )
    ex.add_argument(
        "--replays",
        type=int,
        default=REPLAYS,
        help=f"runs of a finding's minimal schedule: how often it reproduces (default: {REPLAYS})",
    )
    ex.add_argument("--out", type=Path, help="where runs and findings go (default: runs/)")
    ex.add_argument("--env", type=Path, help="use the environment running in this directory")
    ex.add_argument("--backend", choices=names(), help="default: local")
    _add_external(ex)
    ex.set_defaults(handler=cmd_explore)

    report = sub.add_parser(
        "report",
        help="write the report of a run or matrix directory, or merge the directories of a "
        "matrix's shards (--shard) into one",
    )
    report.add_argument("directories", nargs="+", type=Path, metavar="DIRECTORY")
    report.add_argument(
        "--out", type=Path, help="where a merge's report goes (default: the project's runs/)"
    )
    report.set_defaults(handler=cmd_report)

    nb = sub.add_parser("notebooks", help="execute the notebooks with papermill and check them")
    nb.add_argument("names", nargs="*", help="notebooks to run, e.g. 01 or 03-postmortem-...")
    nb.add_argument("-p", "--parameter", nargs=2, action="append", metavar=("NAME", "VALUE"))
    nb.add_argument("--out", type=Path, help="where executed copies go (default: runs/...)")
    nb.add_argument("--env", type=Path, help="use the environment running in this directory")
    nb.set_defaults(handler=cmd_notebooks)

    add_repair_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # A user's variant, relay or Spark job is a module of the folder the command runs in, as
    # with ``python -m``: the console script's own folder is on the path instead.
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    logging.basicConfig(format="chaoslab: %(message)s", level=logging.WARNING)
    handler: Callable[[argparse.Namespace], int] = args.handler  # set by each subcommand
    try:
        with stops_unwrapped():
            return handler(args)
    except LabError as exc:
        # Bad input is one problem per line (FILE: FIELD: problem), each worth its prefix; a
        # server's error carries the tail of its log, which is left as it is.
        lines = str(exc).splitlines() if isinstance(exc, BadInput) else [str(exc)]
        print("\n".join(f"chaoslab: {line}" for line in lines), file=sys.stderr, flush=True)
        return exc.exit_code
    except KeyboardInterrupt:
        print("chaoslab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
