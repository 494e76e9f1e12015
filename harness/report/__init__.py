"""The report: a run directory (results.json, histories, ledgers) -> report.md, PNG plots and
junit.xml; and the terminal tables. It reads the one results model (``harness.results.model``).

Usage::

    from harness.report import write_report, render_table

    report = write_report(Path("runs/baseline-20250101-120000"))
    report.markdown  # runs/.../report.md, with anomalies.png, timeline.png, throughput.png
    print(render_table(scenario_result))  # a harness.results.model.ScenarioResult
"""

from harness.report.story import what_happened
from harness.report.table import render_matrix_table, render_soak_table, render_table
from harness.report.timeline import Timeline, TimelineRow, timeline
from harness.report.write import Report, write_matrix_report, write_report, write_soak_page

__all__ = [
    "Report",
    "Timeline",
    "TimelineRow",
    "render_matrix_table",
    "render_soak_table",
    "render_table",
    "timeline",
    "what_happened",
    "write_matrix_report",
    "write_report",
    "write_soak_page",
]
