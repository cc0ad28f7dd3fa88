"""`dlprobe run train.py --verbose`: the option is the script's there (as designed); when the script refuses it
with a usage error, the report says that the option was dlprobe's and where it goes, instead of "No problem found"."""

from __future__ import annotations


def test_a_dlprobe_option_after_the_script_that_the_script_refuses_is_named(probe):
    result = probe("takes_epochs.py", "--verbose")
    assert result.returncode == 2 and "unrecognized arguments: --verbose" in result.stderr, result.stderr[-2000:]
    (finding,) = result.findings("no-loader")
    assert finding["severity"] == "warning" and finding["evidence"]["own_options"] == ["--verbose"]
    assert "--verbose went to " in finding["title"] and "takes_epochs.py, not to dlprobe" in finding["title"]
    assert finding["fix"].startswith("Put dlprobe's options before the script: `dlprobe run --verbose ")
    assert finding["fix"].endswith("takes_epochs.py ...`.")
    assert "No problem found" not in result.stderr


def test_the_same_option_before_the_script_is_dlprobes(probe):
    result = probe("takes_epochs.py", "--epochs", "1", options=["--verbose"])
    assert result.returncode == 0 and "total 120.0" in result.stdout, result.stderr[-2000:]
    assert result.findings("no-loader") == []
