"""Every report of a real run opens with its verdict: the terminal (a screen by default, the evidence under
--verbose), report.html and report.json."""

from __future__ import annotations

from tests.conftest import run_dlprobe
from tests.htmlpage import read_page

SCREEN = 40  # lines: the leaky run's default report fits a terminal


def _lines(text: str) -> list[str]:
    return [line.rstrip() for line in text.rstrip().splitlines()]


def test_the_leaky_run_opens_with_its_verdict_fits_a_screen_and_keeps_the_evidence_for_verbose(leaky_list_run,
                                                                                                 tmp_path):  # fmt: skip
    result = leaky_list_run
    assert result.returncode == 0, result.stderr
    verdict = result.report["verdict"]
    assert verdict["code"] == "cow-growth" and verdict["code"] == result.report["findings"][0]["code"]
    assert "self.records" in verdict["fix"] and "copy-on-write" in verdict["sentence"]

    default = run_dlprobe(["report", str(result.run_dir)], tmp_path)
    verbose = run_dlprobe(["report", "--verbose", str(result.run_dir)], tmp_path)
    assert default.returncode == verbose.returncode == 0, default.stderr + verbose.stderr
    brief, full = _lines(default.stdout), _lines(verbose.stdout)
    head = f"Verdict: {verdict['severity'].upper()} cow-growth: "
    # after the header and the loaders' table, the first words are the verdict; with --verbose, before every finding
    first = next(i for i, line in enumerate(brief) if not line.startswith(("dlprobe ", "DataLoaders", *"┏┃┡│└")))
    assert brief[first].startswith(head), default.stdout
    assert [line for line in full if line.startswith(head) or line.startswith("╭")][0].startswith(head)
    text = " ".join(" ".join(brief).split())  # a sentence may wrap anywhere
    assert len(brief) <= SCREEN, default.stdout
    assert "total_bytes: " in text and "projected_total_bytes: " in text  # its key numbers, on one line
    assert "fix: `self.records` is a list[dict]" in text
    # the evidence, the detail and every process's memory are --verbose's (and report.json's, and the page's)
    assert "gc_at_fork:" not in text and "suspects:" not in text and "Memory per process" not in text
    assert "Forked workers share the parent's pages" not in text
    full_text = " ".join(" ".join(full).split())
    assert "gc_at_fork:" in full_text and "suspects: attribute=self.records" in full_text
    assert "Forked workers share the parent's pages" in full_text and "Memory per process" in full_text
    assert len(full) > len(brief) + 20
    # `dlprobe run` printed the same default summary
    assert f"Verdict: {verdict['severity'].upper()} cow-growth: " in result.stderr

    page = read_page(result.run_dir, ["cow-growth"]).all_text
    words = " ".join(page.split())
    at = words.index(" ".join(verdict["sentence"].split()))
    assert at < words.index("the script finished") < words.index("Findings (")  # the first thing the page says
