"""report.html of real runs: a check failure whose script path and exception carry markup, in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import SCRIPTS, run_dlprobe
from tests.htmlpage import PLANT, parse_page, read_page

# A directory name cannot hold "/", so the script's own path carries an element with an event handler instead.
MARKUP_DIR = "<img src=x onerror=alert(2)>"
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


@pytest.fixture(scope="module")
def failed_check(tmp_path_factory):
    """`dlprobe check` of a script in a directory named with markup whose worker raises naming a markup path."""
    tmp_path = tmp_path_factory.mktemp("html")
    folder = tmp_path / MARKUP_DIR
    folder.mkdir()
    script = folder / "train.py"
    shutil.copy(SCRIPTS / "sample_path_raises.py", script)
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["check", "--quiet", "--out", str(run_dir), str(script), f"/data/{PLANT}"], tmp_path)
    return tmp_path, proc, run_dir


def test_a_failed_check_gets_a_page_with_its_verdict_and_every_value_escaped(failed_check):
    _, proc, run_dir = failed_check
    assert proc.returncode == 3, proc.stderr  # the script failed: check's own exit code is unchanged by the page
    page = read_page(run_dir, ["bad-sample"])
    text = page.all_text
    assert "dlprobe check: failed (exit code 3)" in text
    assert "script_exit" in text  # the rules table
    assert f"no such sample: /data/{PLANT}/5.jpg" in text  # the exception, as text, in the finding and the events
    assert MARKUP_DIR in text  # the script's path: title, verdict, command to reproduce
    assert "the script failed: exit code 1" in text
    raw = (run_dir / "report.html").read_text()
    assert PLANT not in raw and MARKUP_DIR not in raw  # only ever escaped


def test_report_html_option_writes_the_same_page_elsewhere(failed_check):
    tmp_path, _, run_dir = failed_check
    out = tmp_path / "bug-1234.html"
    proc = run_dlprobe(["report", str(run_dir), "--html", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "bad-sample" in parse_page(out.read_text()).codes
    proc = run_dlprobe(["report", str(run_dir), "--html", str(tmp_path / "missing" / "x.html")], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: cannot write --html") and "hint:" in proc.stderr
    assert "Traceback" not in proc.stderr


def _browser() -> str | None:
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def test_the_page_renders_in_a_headless_browser_without_console_errors(failed_check):
    browser = _browser()
    if browser is None:
        pytest.skip(f"no headless browser installed (looked for {', '.join(BROWSERS)}; apt-get install chromium)")
    tmp_path, _, run_dir = failed_check
    page = run_dir / "report.html"
    # Console messages (a blocked script, a refused load, a markup error) are logged as "CONSOLE" lines.
    proc = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
         f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    console = [line for line in proc.stderr.splitlines() if re.search(r":CONSOLE[:(]", line)]
    assert console == [], console
    dom = proc.stdout
    report = json.loads((run_dir / "report.json").read_text())
    for finding in report["findings"]:
        assert f'data-code="{finding["code"]}"' in dom
    assert dom.count("<svg") >= 1 and "<script" not in dom.lower()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom


def test_a_leaky_run_stopped_mid_epoch_draws_its_projection_with_range_ceiling_and_where_it_was_measured(tmp_path):
    """The list of dicts read by 2 forked workers, the loop stopped after 200 of its 600 batches: cow-growth projects
    the copies to the epoch's end, and the page draws it on the epoch's share, after the verdict."""
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "--quiet", "--out", str(run_dir), str(SCRIPTS / "leaky_list_dataset.py"), "600000",
                        "200"], tmp_path)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [finding] = [f for f in json.loads((run_dir / "report.json").read_text())["findings"] if f["code"] == "cow-growth"]
    at = finding["evidence"]["measured_at_epoch_fraction"]
    assert 0 < at < 1
    raw = (run_dir / "report.html").read_text()
    text = read_page(run_dir, ["cow-growth"]).all_text
    chart = raw[raw.index("Memory projection, loader 0 (cow-growth)") :]
    assert f"measured to {100 * at:.0f}% of the epoch" in chart  # the mark, labelled
    assert '<polygon points="' in chart and "projected at the epoch&#x27;s end" in chart  # the range, as a band
    assert "ceiling: what 2 workers could copy (the parent&#x27;s anonymous memory at fork" in chart  # dashed
    assert "stroke-dasharray" in chart.split("ceiling: what 2 workers")[0][-400:]
    assert "Dots: the readings." in text  # the memory charts draw readings, the band between two
    assert text.index("Verdict") < text.index("Findings (") < text.index("Memory projection")
