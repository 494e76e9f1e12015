"""The few calls the notebooks make, so that they explain rather than re-implement the lab.

lab = Lab.open("01-quickstart", env_dir="")   # starts (or attaches to) an environment
result = lab.run("baseline", events=600, runtimes=["listener"])   # or "scenarios/baseline.yaml"
lab.table(result)                  # a DataFrame, one row per runtime/variant
lab.show(result, "timeline")       # the report's plot, inline
found = lab.explore(["idempotent"], budget="5m", seed=3)   # chaoslab explore, in the notebook
lab.findings(found), lab.coverage(found)                    # DataFrames
checks = Checks("01-quickstart", lab.out_dir)
checks.expect("transactional keeps every change once", ...)
checks.save()                      # results.json, which `chaoslab notebooks` reads
lab.close()
"""

from __future__ import annotations

import atexit
import json
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.environment.doctor import component_versions
from harness.environment.base import Environment
from harness.environment.backends import attach, open_environment
from harness.errors import LabError
from harness.explore import inputs as explore_inputs
from harness.explore.explorer import explore
from harness.explore.model import DEFAULT_STRATEGY, REPLAYS, Exploration, aims
from harness.notebooks.execute import RESULTS, Check
from harness.paths import find_scenario, project_root, runs_dir
from harness.pipeline.runtimes import DEFAULT as DEFAULT_RUNTIME
from harness.report import write_report
from harness.results.model import ScenarioResult, VariantResult
from harness.run.runner import run_scenario
from harness.scenario import (
    Scenario,
    load_scenario,
    parse_scenario,
    runnable,
)

if TYPE_CHECKING:
    import pandas as pd

PLOTS = {"timeline": "timeline.png", "anomalies": "anomalies.png", "throughput": "throughput.png"}


@dataclass
class Lab:
    env: Environment
    out_dir: Path
    owned: bool  # started by this Lab: stopped by close() (or when the kernel exits)

    @classmethod
    def open(
        cls, notebook: str = "lab", *, out_dir: str | Path = "", env_dir: str | Path = ""
    ) -> Lab:
        """Attach to the environment running in ``env_dir``, or start one in ``out_dir/env``.

        Runs go to ``out_dir``, or (when it is empty) to the project's
        ``runs/notebooks/<notebook>``, wherever the kernel was started."""
        out = runs_dir() / "notebooks" / notebook
        if out_dir:
            out = Path(out_dir).expanduser().resolve()
        out.mkdir(parents=True, exist_ok=True)
        print(f"this notebook's runs go to {out}")
        # The kernel runs in notebooks/: a user's module:callable of the project folder is
        # found as the chaoslab command finds it.
        if str(project_root()) not in sys.path:
            sys.path.insert(0, str(project_root()))
        if env_dir:
            return cls(attach(env_dir), out, owned=False)
        env = open_environment("local", out / "env", progress=print)
        env.start()
        atexit.register(env.stop)  # a notebook left open must not leave servers behind
        return cls(env, out, owned=True)

    def scenario(self, source: str | Path | dict[str, Any], **overrides: Any) -> Scenario:
        return make_scenario(source, **overrides)

    def run(
        self, scenario: Scenario | str | Path | dict[str, Any], **overrides: Any
    ) -> ScenarioResult:
        """Run a scenario, write its report, and return the result."""
        if not isinstance(scenario, Scenario) or overrides:
            scenario = make_scenario(scenario, **overrides)
        for note in runnable(scenario, self.env.abilities):
            print(f"note: {note}")
        out = self.out_dir / f"{scenario.name}-{time.strftime('%H%M%S')}"
        result = run_scenario(
            self.env, scenario, out, versions=component_versions(), progress=print
        )
        write_report(out)
        return result

    def explore(
        self,
        variants: list[str],
        *,
        budget: str = "5m",
        seed: int = 1,
        runtime: str = "listener",
        faults: list[str] | None = None,
        findings: int | None = None,
        replays: int = REPLAYS,
        strategy: str = DEFAULT_STRATEGY,
    ) -> Exploration:
        """``chaoslab explore`` on this notebook's environment: runs until the budget ends (or
        ``findings`` were found), one line per run; the report goes to ``out_dir/explore-SEED``."""
        plan = explore_inputs.plan(
            runtime=runtime,
            variants=variants,
            kinds=faults,
            backend=self.env.abilities,
            budget=budget,
            seed=seed,
            out=self.out_dir / f"explore-{seed}-{time.strftime('%H%M%S')}",
            findings=findings,
            replays=replays,
            strategy=strategy,
        )
        return explore(self.env, plan, progress=print, stop=threading.Event())

    def findings(self, state: Exploration) -> pd.DataFrame:
        """One row per finding: what broke, the minimal schedule, how often it reproduced."""
        import pandas as pd

        rows = [
            {
                "finding": f"found-{f.number}",
                "violation": "; ".join(map(str, f.violations)),
                "minimal schedule": f.minimal.schedule(),
                "events": f.minimal.shape.events,
                "reproduced": f"{f.reproduced}/{f.replays}",
                "scenario": str(f.scenario_file),
            }
            for f in state.findings
        ]
        return pd.DataFrame(rows, columns=["finding", "violation", "minimal schedule", "events",
                                           "reproduced", "scenario"])  # fmt: skip

    def coverage(self, state: Exploration) -> pd.DataFrame:
        """Fault kind x target x variant: how often drawn and how often it fired."""
        import pandas as pd

        rows = [asdict(a) for a in aims(state.runs)]
        columns = ["kind", "target", "variant", "drawn", "fired"]
        return pd.DataFrame(rows, columns=columns).set_index(["kind", "target", "variant"])

    def finding_timeline(self, state: Exploration, number: int = 1) -> Any:
        """The timeline of a replay of finding ``number`` that broke the promise, inline."""
        from IPython.display import Image

        report = state.findings[number - 1].report
        if report is None:
            raise LabError(f"found-{number} has no replay that shows it")
        return Image(filename=str(report.parent / PLOTS["timeline"]))  # type: ignore[no-untyped-call]  # IPython has no annotations

    def table(self, result: ScenarioResult) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame([_row(r) for r in result.variants]).set_index(["runtime", "variant"])

    def stages(self, result: ScenarioResult) -> pd.DataFrame:
        """An outbox run's stages, per relay (seed 003): the entries MongoDB acknowledged, what
        reached the target topics, what the sink stored - and the copies and losses of each."""
        import pandas as pd

        rows = [_stages(r) for r in result.variants if r.relay is not None]
        return pd.DataFrame(rows).set_index("relay")

    def plot_path(self, result: ScenarioResult, plot: str) -> Path:
        return _run_dir(result) / PLOTS[plot]

    def show(self, result: ScenarioResult, plot: str) -> Any:
        """The report's ``timeline``, ``anomalies`` or ``throughput`` plot, for display."""
        from IPython.display import Image

        return Image(filename=str(self.plot_path(result, plot)))  # type: ignore[no-untyped-call]  # IPython has no annotations

    def close(self) -> None:
        if self.owned:
            self.env.stop()


def make_scenario(source: Scenario | str | Path | dict[str, Any], **overrides: Any) -> Scenario:
    """A scenario from a library name (``baseline``), a file (``scenarios/baseline.yaml``,
    found from the project's root wherever the kernel runs), a dict or a parsed scenario, with
    ``events``, ``seed``, ``variants`` and ``runtimes`` overridden if given, and any other
    top-level field replaced."""
    if isinstance(source, Scenario):
        scenario = source
    elif isinstance(source, dict):
        scenario = parse_scenario(source)
    else:
        scenario = load_scenario(find_scenario(source))
    known = {
        k: overrides.pop(k) for k in ("seed", "events", "variants", "runtimes") if k in overrides
    }
    scenario = scenario.with_overrides(**known)
    return replace(scenario, **overrides) if overrides else scenario


def _run_dir(result: ScenarioResult) -> Path:
    assert result.directory is not None, "a result the runner made names its directory"
    return result.directory


def _row(r: VariantResult) -> dict[str, Any]:
    v = r.verdict
    return {
        "runtime": r.runtime,
        "variant": r.variant,
        "acked": v.acked,
        "in_sink": v.in_sink,
        "duplicates": v.duplicates,
        "copies": ", ".join(f"{n}x: {c}" for n, c in sorted(v.copies.items())) or "-",
        "lost": v.lost,
        "stale": v.stale,
        "dead_lettered": v.dead_lettered,
        "events_per_s": round(r.events_per_s),
        "crashes": r.crashes,
        "expectation": r.outcome.word + ("" if r.passed else ": " + r.reason),
    }


def _stages(r: VariantResult) -> dict[str, Any]:
    assert r.relay is not None
    published, stored = r.relay.published, r.verdict
    return {
        "relay": r.variant,
        "written": stored.acked,
        "published": published.unique_in_sink,
        "published copies": published.duplicates,
        "lost at publish": published.lost,
        "history lost": r.relay.history_lost,
        "stored": stored.unique_in_sink,
        "stored copies": stored.duplicates,
        "lost in all": stored.lost,
        "crashes": r.crashes,
    }


def verdict(
    result: ScenarioResult, variant: str, runtime: str = DEFAULT_RUNTIME.name
) -> VariantResult:
    """One variant's result (by label or name) from a scenario result."""
    for r in result.variants:
        if r.runtime == runtime and (r.variant == variant or r.variant.split("[")[0] == variant):
            return r
    raise KeyError(f"no {runtime}/{variant} in {[(r.runtime, r.variant) for r in result.variants]}")


@dataclass
class Checks:
    """A notebook's own expectations; ``save`` writes them where ``chaoslab notebooks`` looks."""

    notebook: str
    out_dir: Path
    results: list[Check] = field(default_factory=list)

    def expect(self, name: str, passed: bool, detail: str = "") -> bool:
        self.results.append(Check(name, bool(passed), detail))
        print(f"{'pass' if passed else 'FAIL'}: {name}" + (f" ({detail})" if detail else ""))
        return bool(passed)

    def fired(self, result: ScenarioResult) -> bool:
        """Expect that every planned fault of the run fired, in every variant: a count taken
        without its fault says nothing about it."""
        missed = [f"{r.runtime}/{r.variant}: {u}" for r in result.variants for u in r.unfired]
        return self.expect(
            f"{result.name}: every planned fault fired", not missed, "; ".join(missed)
        )

    @property
    def passed(self) -> bool:
        return bool(self.results) and all(e.passed for e in self.results)

    def save(self) -> Path:
        path = Path(self.out_dir) / RESULTS
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "notebook": self.notebook,
                    "passed": self.passed,
                    "expectations": [asdict(e) for e in self.results],
                },
                indent=2,
            )
        )
        return path
