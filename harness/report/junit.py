"""junit.xml: one <testsuite> per scenario, one <testcase> per runtime/variant.

The shape follows the common JUnit XML schema (Jenkins, GitLab, GitHub reporters): the root
is <testsuites>; a testsuite has name, tests, failures, errors, skipped, time, timestamp and
hostname, then <properties>, its testcases, <system-out> and <system-err>.
"""

from __future__ import annotations

import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path

from .load import Run, VariantRun

HOSTNAME = "chaoslab"  # a report is the same wherever it is written


def _counts(v: VariantRun) -> str:
    d = v.verdict
    return (
        f"acked={d.acked} in_sink={d.in_sink} duplicates={d.duplicates} "
        f"duplicated_keys={d.duplicated_keys} lost={d.lost} stale={d.stale} "
        f"dead_lettered={d.dead_lettered} poison_missing={d.poison_missing} "
        f"phantoms={d.phantoms} crashes={v.crashes} restarts={v.restarts} "
        f"events_per_s={v.events_per_s:.1f}"
    )


def testcase(run: Run, v: VariantRun) -> ET.Element:
    case = ET.Element(
        "testcase", name=v.label, classname=run.name, time=f"{max(v.seconds, 0.0):.3f}"
    )
    if not v.passed:
        failure = ET.SubElement(case, "failure", message=v.reason, type="expectation")
        failure.text = "\n".join([*v.failures, "", _counts(v)])
    out = ET.SubElement(case, "system-out")
    out.text = _counts(v)
    return case


def testsuite(run: Run, index: int = 0) -> ET.Element:
    failures = len(run.failed)
    errors = 1 if run.error else 0
    suite = ET.Element(
        "testsuite",
        name=run.name,
        package="chaoslab",
        id=str(index),
        tests=str(len(run.variants) + errors),
        failures=str(failures),
        errors=str(errors),
        skipped="0",
        time=f"{run.seconds:.3f}",
        timestamp=time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(run.started_at)),
        hostname=HOSTNAME,
    )
    props = ET.SubElement(suite, "properties")
    values = {
        "seed": "" if run.seed is None else str(run.seed),
        "backend": run.backend,
        "scenario_file": run.file,
        **{f"version.{k}": v for k, v in run.versions.items()},
    }
    for name, value in values.items():
        ET.SubElement(props, "property", name=name, value=value)
    for v in run.variants:
        suite.append(testcase(run, v))
    if run.error:
        # A scenario that left no results must not read as green in CI.
        case = ET.SubElement(suite, "testcase", name="results", classname=run.name, time="0")
        ET.SubElement(case, "error", message=run.error, type="no-results").text = run.error
    ET.SubElement(suite, "system-out").text = run.description
    ET.SubElement(suite, "system-err")
    return suite


def junit_tree(runs: Sequence[Run], name: str = "chaoslab") -> ET.ElementTree:
    suites = [testsuite(run, i) for i, run in enumerate(runs)]
    root = ET.Element(
        "testsuites",
        name=name,
        tests=str(sum(int(s.get("tests", "0")) for s in suites)),
        failures=str(sum(int(s.get("failures", "0")) for s in suites)),
        errors=str(sum(int(s.get("errors", "0")) for s in suites)),
        time=f"{sum(run.seconds for run in runs):.3f}",
    )
    root.extend(suites)
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(runs: Sequence[Run], path: Path, name: str = "chaoslab") -> Path:
    junit_tree(runs, name).write(path, encoding="utf-8", xml_declaration=True)
    return path
