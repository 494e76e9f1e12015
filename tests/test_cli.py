"""The chaoslab command: doctor, and bad input refused with exit code 2 before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import cli
from harness.environment.containers.engine import engine_problem
from harness.environment.servers import postgres
from tests.support import chaoslab, processes_started_in


def test_doctor_says_which_backends_can_run_here() -> None:
    result = chaoslab("doctor")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "local      can run" in result.stdout
    problem = engine_problem()
    if problem is None:  # which engine it found, or that it starts podman itself
        assert "containers can run" in result.stdout, result.stdout
        assert "container engine" in result.stdout
    else:
        assert f"containers cannot run: container engine: {problem}" in result.stdout


def test_doctor_json_lists_versions_and_backends() -> None:
    result = chaoslab("doctor", "--json")
    report = json.loads(result.stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert checks["java"]["ok"] and "17" in checks["java"]["detail"]
    assert checks["maven"]["ok"] and "Maven 3" in checks["maven"]["detail"]
    assert checks["kafka"]["ok"] and checks["kafka"]["detail"].startswith("4.3.1, ")
    backends = {b["backend"]: b for b in report["backends"]}
    assert backends["local"]["can_run"] is True
    assert backends["containers"]["can_run"] is (engine_problem() is None)
    # PostgreSQL, a CDC source's database: named with its version, or what installs it.
    found, detail = postgres.installed()
    assert checks["postgresql"]["ok"] is (found is not None)
    assert checks["postgresql"]["detail"].startswith(detail), checks["postgresql"]
    assert checks["psycopg"]["ok"], checks["psycopg"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["up", "--backend", "kubernetes"], "invalid choice: 'kubernetes'"),
        (["up", "--spark-cores", "0"], "spark cores must be at least 1, got 0"),
        (["up", "--spark-cores", "two"], "invalid int value: 'two'"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["matrix", "--repeat", "0", "baseline"], "--repeat must be >= 1, got 0"),
    ],
)
def test_bad_arguments_exit_2_and_start_nothing(
    tmp_path: Path, args: list[str], message: str
) -> None:
    result = chaoslab(*args, "--dir", str(tmp_path)) if args[0] == "up" else chaoslab(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert processes_started_in(tmp_path) == []
    assert not (tmp_path / "state.json").exists()


def test_a_directory_that_is_a_file_exits_2(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = chaoslab("up", "--dir", str(not_a_dir))
    assert result.returncode == 2
    assert f"{not_a_dir} exists and is not a directory" in result.stderr


def test_the_old_docker_backend_name_is_refused(tmp_path: Path) -> None:
    result = chaoslab("up", "--backend", "docker", "--dir", str(tmp_path))
    assert result.returncode == 2
    assert (
        "invalid choice: 'docker' (choose from 'local', 'external', 'containers')" in result.stderr
    )
    assert processes_started_in(tmp_path) == []


def test_status_and_down_of_an_empty_directory(tmp_path: Path) -> None:
    status = chaoslab("status", "--dir", str(tmp_path))
    assert status.returncode == 1 and "no environment in" in status.stdout
    down = chaoslab("down", "--dir", str(tmp_path))
    assert down.returncode == 0 and "nothing running" in down.stdout


def test_run_repeat_and_demo_give_the_matrix_every_option_it_reads() -> None:
    """They run a matrix: a matrix option they leave out is an AttributeError at run time
    (``run --repeat`` once failed so, when ``--shard`` came)."""
    parser = cli.build_parser()
    wanted = set(vars(parser.parse_args(["matrix"])))
    for made in (
        cli.repeat_matrix(parser.parse_args(["run", "baseline", "--repeat", "2"])),
        cli.demo_matrix(parser.parse_args(["demo"])),
    ):
        assert wanted <= set(vars(made)), sorted(wanted - set(vars(made)))
