"""RunDir, the one handle for a run directory's paths, and the rule it serves: no module outside dlprobe/rundir/ joins
layout.py's names into a path by hand (with `/`, `os.path.join` or an f-string)."""

from __future__ import annotations

import ast
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dlprobe.rundir import layout
from dlprobe.rundir.files import ReadProblems, run_subdir
from dlprobe.rundir.handle import RunDir, faults_ref, hang_record_ref, inflight_ref

PACKAGE = Path(__file__).resolve().parents[2] / "dlprobe"
# sitecustomize.py runs in every process of the target, most of which never import dlprobe: it spells events.jsonl
# itself (tests/unit/test_launch.py keeps it equal to layout.py's), so importing the handle there would defeat it.
EXEMPT = {"in_training/injected/sitecustomize.py"}
LAYOUT_NAMES = {
    name
    for name, value in vars(layout).items()
    if not name.startswith("_")
    and (
        (name.isupper() and isinstance(value, str))
        or (inspect.isfunction(value) and value.__module__ == layout.__name__)
    )
}
FILE_NAMES = set(layout.RUN_DIR_NAMES)
_SEGMENT = re.compile(r"^/([^\s/{}]+)")


def _mentions_layout(node: ast.AST) -> bool:
    """Whether an expression uses one of layout.py's names (HANGS_DIR, schema.EVENTS_FILE, hang_record_name(n))
    or spells one of the run directory's file names ("report.json")."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id in LAYOUT_NAMES:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in LAYOUT_NAMES:
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and sub.value in FILE_NAMES:
            return True
    return False


def _is_path_join(call: ast.Call) -> bool:
    func = call.func
    return isinstance(func, ast.Attribute) and func.attr == "join" and ast.unparse(func.value) in ("os.path", "path")


def _fstring_joins(node: ast.JoinedStr) -> bool:
    """f"{HANGS_DIR}/{name}" or f"{run_dir}/check.json": a path spelled in an f-string ("hangs/ write", a label
    with a space after the slash, is no path)."""
    values = node.values
    for before, after in zip(values, values[1:], strict=False):
        if not (isinstance(after, ast.Constant) and isinstance(after.value, str)):
            continue
        segment = _SEGMENT.match(after.value)
        if isinstance(before, ast.FormattedValue) and (
            (segment and segment.group(1) in FILE_NAMES)
            or (_mentions_layout(before) and (after.value == "/" or segment is not None))
        ):
            return True
    return False


def hand_joins(source: str) -> list[int]:
    """The lines of `source` that compose a run-directory path by hand."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            if _mentions_layout(node.left) or _mentions_layout(node.right):
                found.append(node.lineno)
        elif isinstance(node, ast.Call) and _is_path_join(node):
            if any(_mentions_layout(arg) for arg in node.args):
                found.append(node.lineno)
        elif isinstance(node, ast.JoinedStr) and _fstring_joins(node):
            found.append(node.lineno)
    return sorted(set(found))


def test_no_module_outside_rundir_composes_run_dir_paths_by_hand():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("rundir/") or rel in EXEMPT:
            continue
        lines = hand_joins(path.read_text())
        if lines:
            offenders[rel] = lines
    assert offenders == {}, f"use dlprobe.rundir.handle.RunDir for these paths (file: lines): {offenders}"


def test_the_scan_sees_each_way_of_composing_by_hand():
    for source in (
        "p = run_dir / EVENTS_FILE",
        "p = schema.HANGS_DIR / x",
        "p = Path(out) / 'hangs' / name",
        "p = folder / hang_record_name(3)",
        "p = os.path.join(run_dir, STACKS_DIR, 'x')",
        "p = self.run_dir / (STACKS_FILE + '.burst')",
        "p = f'{HANGS_DIR}/{hang_record_name(n)}'",
        "p = f'{run_dir}/check.json'",
    ):
        assert hand_joins(source) == [1], source
    for source in (
        "p = RunDir(run_dir).events",
        "label = f'{HANGS_DIR}/ write'",
        "label = f'{STACKS_FILE} write'",
        "p = root / 'cgroup.controllers'",
        "p = os.path.join(base, 'dlprobe')",
    ):
        assert hand_joins(source) == [], source


def test_the_handle_names_every_path_as_layout_does(tmp_path):
    files = RunDir(str(tmp_path))
    assert files.root == tmp_path and os.fspath(files) == str(tmp_path) and str(files) == str(tmp_path)
    assert RunDir(tmp_path) == files and hash(RunDir(tmp_path)) == hash(files)
    with pytest.raises(AttributeError):
        files.root = tmp_path / "other"  # type: ignore[misc]
    top = {
        "meta": layout.META_FILE,
        "events": layout.EVENTS_FILE,
        "samples": layout.SAMPLES_FILE,
        "result": layout.RESULT_FILE,
        "report": layout.REPORT_FILE,
        "report_html": layout.REPORT_HTML_FILE,
        "trace": layout.TRACE_FILE,
        "plot": layout.PLOT_FILE,
        "plot_partial": layout.PLOT_PARTIAL_FILE,
        "plot_error": layout.PLOT_ERROR_FILE,
        "stderr": layout.STDERR_FILE,
        "kernel": layout.KERNEL_FILE,
        "check": layout.CHECK_FILE,
        "stacks": layout.STACKS_FILE,
        "stacks_meta": layout.STACKS_META_FILE,
        "stacks_speedscope": layout.STACKS_SPEEDSCOPE_FILE,
        "py_spy_log": layout.PY_SPY_LOG_FILE,
        "attach": layout.ATTACH_FILE,
        "live_summary": layout.LIVE_SUMMARY_FILE,
        "tune_result": layout.TUNE_RESULT_FILE,
        "tune_plot": layout.TUNE_PLOT_FILE,
        "hangs_dir": layout.HANGS_DIR,
        "stacks_dir": layout.STACKS_DIR,
        "inflight_dir": layout.INFLIGHT_DIR,
        "faults_dir": layout.FAULTS_DIR,
    }
    for attribute, name in top.items():
        assert getattr(files, attribute) == tmp_path / name, attribute
    assert files.stacks_burst == tmp_path / "stacks.txt.burst"
    assert files.hang_record(3) == tmp_path / "hangs" / "hang-3.json"
    assert files.hang_stack(2, 41) == tmp_path / "stacks" / "hang2-41.json"
    assert files.faulthandler == tmp_path / "stacks" / "faulthandler.txt"
    assert files.inflight_slot(41) == tmp_path / "inflight" / "41.bin"
    assert files.fault_record(41) == tmp_path / "faults" / "41.txt"
    assert files.attempt(2) == RunDir(tmp_path / "attempt-2")
    assert (hang_record_ref(3), inflight_ref("41.bin"), faults_ref("41.txt")) == (
        "hangs/hang-3.json",
        "inflight/41.bin",
        "faults/41.txt",
    )


def test_listing_reads_only_a_real_folder_and_never_a_linked_one(tmp_path):
    run, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run.mkdir()
    elsewhere.mkdir()
    (elsewhere / "hang-1.json").write_text("{}")
    (elsewhere / "41.txt").write_text("")
    files = RunDir(run)
    files.hangs_dir.symlink_to(elsewhere)
    problems = ReadProblems()
    assert run_subdir(files.hangs_dir, problems) is None
    assert problems.lines() == [{"file": "hangs/", "problem": "a symbolic link, not followed"}]
    files.faults_dir.mkdir()
    for name in ("41.txt", "notes.md"):
        (files.faults_dir / name).write_text("")
    folder = run_subdir(files.faults_dir, problems)
    assert folder == files.faults_dir
    assert [p.name for p in RunDir.fault_records_in(folder)] == ["41.txt"]
    files.faults_dir.rename(run / "old")
    (run / "hangs").unlink()
    files.hangs_dir.mkdir()
    files.hang_record(2).write_text("{}")
    (files.hangs_dir / "other.json").write_text("{}")
    assert [p.name for p in RunDir.hang_records_in(files.hangs_dir)] == ["hang-2.json"]


def test_importing_the_handle_is_light():
    """The training process imports it: nothing beyond what the run-directory contract already brings."""
    code = (
        "import sys; before = set(sys.modules); import dlprobe.rundir.schema; schema = set(sys.modules);"
        "import dlprobe.rundir.handle; print(sorted(set(sys.modules) - schema - {'dlprobe.rundir.handle'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
