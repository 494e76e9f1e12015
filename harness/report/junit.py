"""junit.xml: one <testsuite> per scenario (a <testcase> per runtime/variant), or one per
notebook run (a <testcase> per recorded expectation).

The shape follows the common JUnit XML schema (Jenkins, GitLab, GitHub reporters): the root
is <testsuites>; a testsuite has name, tests, failures, errors, skipped, time, timestamp and
hostname, then <properties>, its testcases, <system-out> and <system-err>.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from harness.results.model import ScenarioResult, VariantResult
from harness.results.outcome import Outcome

HOSTNAME = "chaoslab"  # a report is the same wherever it is written


@dataclass(frozen=True)
class Case:
    """One testcase: ``failure`` when what it checks did not hold, ``error`` when it could not
    be judged (a fault that did not fire, a notebook that stopped)."""

    name: str
    classname: str
    seconds: float = 0.0
    failure: str = ""  # the message
    error: str = ""
    kind: str = ""  # the failure's or error's type
    text: str = ""  # the failure's or error's body
    out: str = ""  # system-out


def case_element(case: Case) -> ET.Element:
    element = ET.Element(
        "testcase", name=case.name, classname=case.classname, time=f"{max(case.seconds, 0):.3f}"
    )
    for tag, message in (("failure", case.failure), ("error", case.error)):
        if message:
            ET.SubElement(element, tag, message=message, type=case.kind).text = case.text
    if case.out:
        ET.SubElement(element, "system-out").text = case.out
    return element


def suite_element(
    name: str,
    cases: Sequence[Case],
    *,
    index: int = 0,
    seconds: float = 0.0,
    started_at: float | None = None,
    properties: Mapping[str, str] | None = None,
    out: str = "",
) -> ET.Element:
    started = time.time() if started_at is None else started_at
    suite = ET.Element(
        "testsuite",
        name=name,
        package="chaoslab",
        id=str(index),
        tests=str(len(cases)),
        failures=str(sum(1 for c in cases if c.failure)),
        errors=str(sum(1 for c in cases if c.error and not c.failure)),
        skipped="0",
        time=f"{seconds:.3f}",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(started)),
        hostname=HOSTNAME,
    )
    props = ET.SubElement(suite, "properties")
    for key, value in (properties or {}).items():
        ET.SubElement(props, "property", name=key, value=value)
    suite.extend(case_element(c) for c in cases)
    ET.SubElement(suite, "system-out").text = out
    ET.SubElement(suite, "system-err")
    return suite


def junit_document(suites: Sequence[ET.Element], name: str = "chaoslab") -> ET.ElementTree:
    def total(attribute: str) -> int:
        return sum(int(s.get(attribute, "0")) for s in suites)

    root = ET.Element(
        "testsuites",
        name=name,
        tests=str(total("tests")),
        failures=str(total("failures")),
        errors=str(total("errors")),
        time=f"{sum(float(s.get('time', '0')) for s in suites):.3f}",
    )
    root.extend(suites)
    ET.indent(root)
    return ET.ElementTree(root)


# -- scenario runs ----------------------------------------------------------------------------


def _counts(v: VariantResult) -> str:
    d = v.verdict
    return (
        f"acked={d.acked} in_sink={d.in_sink} duplicates={d.duplicates} "
        f"duplicated_keys={d.duplicated_keys} lost={d.lost} stale={d.stale} "
        f"dead_lettered={d.dead_lettered} poison_missing={d.poison_missing} "
        f"phantoms={d.phantoms} crashes={v.crashes} restarts={v.restarts} "
        f"events_per_s={v.events_per_s:.1f}"
    )


def variant_case(run: ScenarioResult, v: VariantResult) -> Case:
    case = Case(v.label, run.name, v.seconds, out=_counts(v))
    if v.outcome is Outcome.UNFIRED:
        # Not a failure of the variant: the run could not judge it.
        body = "\n".join([*(str(u) for u in v.unfired), "", _counts(v)])
        return replace(case, error=v.reason, kind="fault-not-fired", text=body)
    if not v.passed:
        body = "\n".join([*v.failures, "", _counts(v)])
        return replace(case, failure=v.reason, kind="expectation", text=body)
    return case


def testsuite(run: ScenarioResult, index: int = 0) -> ET.Element:
    cases = [variant_case(run, v) for v in run.variants]
    if run.error:
        # A scenario that left no results must not read as green in CI.
        cases.append(Case("results", run.name, error=run.error, kind="no-results", text=run.error))
    properties = {
        "seed": "" if run.seed is None else str(run.seed),
        "backend": run.backend,
        "scenario_file": run.file,
        **{f"version.{k}": v for k, v in run.versions.items()},
    }
    return suite_element(
        run.name,
        cases,
        index=index,
        seconds=run.seconds,
        started_at=run.started_at,
        properties=properties,
        out=run.description,
    )


def junit_tree(runs: Sequence[ScenarioResult], name: str = "chaoslab") -> ET.ElementTree:
    return junit_document([testsuite(run, i) for i, run in enumerate(runs)], name)


def write_junit(runs: Sequence[ScenarioResult], path: Path, name: str = "chaoslab") -> Path:
    junit_tree(runs, name).write(path, encoding="utf-8", xml_declaration=True)
    return path
