"""JUnit XML for CI systems: one testcase per rule, a <failure> with the reason for each failing one."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from dlprobe.check.rules import FAIL, SKIP, RuleResult


def junit_xml(rows: list[RuleResult], suite: str, duration_s: float | None, properties: dict[str, Any]) -> str:
    failures = sum(r.status == FAIL for r in rows)
    skipped = sum(r.status == SKIP for r in rows)
    root = ET.Element("testsuites", name="dlprobe", tests=str(len(rows)), failures=str(failures))
    testsuite = ET.SubElement(
        root,
        "testsuite",
        name=suite,
        tests=str(len(rows)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{duration_s or 0:.3f}",
    )
    props = ET.SubElement(testsuite, "properties")
    for key, value in properties.items():
        ET.SubElement(props, "property", name=key, value=str(value))
    for row in rows:
        case = ET.SubElement(testsuite, "testcase", classname=suite, name=row.rule, time="0")
        detail = f"threshold: {row.threshold}\nobserved: {row.observed}" + (
            f"\nfrom: {row.source}" if row.source else ""
        )
        if row.explanation:
            detail += f"\nwhy: {row.explanation}"
        if row.status == FAIL:
            ET.SubElement(case, "failure", message=row.message, type="dlprobe.check").text = detail
        elif row.status == SKIP:
            ET.SubElement(case, "skipped", message=row.message)
        else:
            ET.SubElement(case, "system-out").text = detail
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def write_junit(path: Path, rows: list[RuleResult], suite: str, duration_s: float | None,
                properties: dict[str, Any]) -> None:  # fmt: skip
    path.write_text(junit_xml(rows, suite, duration_s, properties))
