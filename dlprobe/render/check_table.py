"""The check's verdict in the terminal: one table row per rule, then why each failing rule failed."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dlprobe.check.rules import BASELINE_MEASURED, BASELINE_RULE, FAIL, PASS, RuleResult
from dlprobe.rundir.handle import RunDir

STATUS_STYLE = {PASS: "green", FAIL: "bold red", "skip": "dim"}
VERDICTS = {0: ("PASSED", "bold green"), 1: ("FAILED", "bold red"), 3: ("SCRIPT FAILED", "bold red")}


def rules_table(rows: list[RuleResult]) -> Table:
    table = Table(title="dlprobe check", title_justify="left")
    table.add_column("rule", no_wrap=True)
    table.add_column("threshold")
    table.add_column("observed")
    table.add_column("result", no_wrap=True)
    for row in rows:
        table.add_row(row.rule, row.threshold, row.observed, Text(row.status.upper(), style=STATUS_STYLE[row.status]))
    return table


def verdict(rows: list[RuleResult], exit_code: int) -> Text:
    failed = [r for r in rows if r.status == FAIL]
    word, style = VERDICTS.get(exit_code, ("FAILED", "bold red"))
    text = Text()
    text.append(f"check {word}", style=style)
    counted = [r for r in rows if r.status != "skip"]
    text.append(f": {len(counted) - len(failed)} of {len(counted)} rules passed")
    skipped = [r for r in rows if r.status == "skip"]
    off = sum(1 for r in skipped if "[baseline_margins]" in r.message)  # left out by the config, not unmeasured
    if len(skipped) > off:
        text.append(f", {len(skipped) - off} skipped (nothing measured)")
    if off:
        text.append(f", {off} not compared (off in the config)")
    return text


def check_summary(rows: list[RuleResult], exit_code: int, run_dir: str | None = None) -> Group:
    parts: list[Table | Text] = [rules_table(rows)]
    for row in rows:
        if row.status == FAIL:
            line = Text()
            line.append(f"{row.rule}: ", style="bold red")
            line.append(row.message)
            if row.source:
                line.append(f"  [{row.source}]", style="dim")
            parts.append(line)
            if row.explanation:
                parts.append(Text(f"  why: {row.explanation}"))
    if any(r.rule.startswith("baseline ") and r.status != "skip" for r in rows):
        parts.append(Text(f"Baseline rule: {BASELINE_RULE} ({BASELINE_MEASURED})", style="dim"))
    parts.append(verdict(rows, exit_code))
    if run_dir:
        parts.append(Text(f"Verdict saved in {RunDir(run_dir).check}", style="dim"))
    return Group(*parts)
