"""`dlprobe scan` on real datasets in real worker processes: exactly the planted bad samples, nothing else."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.conftest import SCRIPTS, run_dlprobe
from tests.htmlpage import parse_page

# Mirrors PLANTED in tests/scripts/scan_planted.py.
PLANTED = {5: "shape", 11: "none", 17: "nan", 23: "exception", 29: "crash", 37: "timeout", 41: "dtype", 50: "nan"}
REPO = Path(__file__).resolve().parents[2]


def _scan(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "scan.json"
    proc = run_dlprobe(["scan", "--json", str(out), *args], tmp_path, timeout=120)
    return proc, (json.loads(out.read_text()) if out.exists() else {})


def _kinds(result: dict) -> dict[int, str]:
    key = result["unit"]
    return {entry[key]: entry["kind"] for entry in result["bad"]}


def test_planted_bad_samples_are_found_exactly_and_the_exclude_file_lets_training_finish(tmp_path):
    exclude = tmp_path / "bad.txt"
    page = tmp_path / "scan.html"
    proc, result = _scan(tmp_path, "--sample-timeout", "1", "--exclude-out", str(exclude), "--html", str(page),
                         str(SCRIPTS / "scan_planted.py"))  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert _kinds(result) == PLANTED
    assert result["total"] == result["scanned"] == 64 and result["complete"]
    by_index = {entry["index"]: entry for entry in result["bad"]}
    assert "SIGSEGV" in by_index[29]["detail"]
    assert by_index[23]["detail"] == "ValueError: corrupt record 23"
    assert by_index[5]["detail"].startswith("sample[0] has shape [3, 8, 7], expected [3, 8, 8]")
    assert by_index[41]["detail"].startswith("sample[0] has dtype float64, expected float32")
    assert "Inf" in by_index[50]["detail"] and "NaN" in by_index[17]["detail"]
    assert "index 29" in proc.stdout and "worker killed by SIGSEGV" in proc.stdout
    text = parse_page(page.read_text()).all_text
    assert f"{len(PLANTED)} bad samples of 64 checked" in text and "ValueError: corrupt record 23" in text
    # The hung and the crashed workers were replaced and every worker was ended: nothing is left running.
    script = str(SCRIPTS / "scan_planted.py")
    assert not [p for p in psutil.process_iter(["cmdline"]) if script in (p.info["cmdline"] or [])]

    # Without the exclude file this training loop dies (segfault, hang, None); with it, it finishes.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    trained = subprocess.run(
        [sys.executable, script, "--train-excluding", str(exclude)], capture_output=True, text=True, timeout=60, env=env
    )
    assert trained.returncode == 0, trained.stderr
    assert trained.stdout.strip() == f"trained on {64 - len(PLANTED)} samples"


def test_png_folder_with_truncated_and_empty_files_names_each_file(tmp_path):
    image_module = pytest.importorskip("PIL.Image")
    import numpy as np

    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        image_module.fromarray((rng.random((16, 16, 3)) * 255).astype("uint8")).save(folder / f"img{i:02d}.png")
    for i, keep in ((3, 0.5), (8, 0.1)):
        path = folder / f"img{i:02d}.png"
        data = path.read_bytes()
        path.write_bytes(data[: int(len(data) * keep)])
    (folder / "img05.png").write_bytes(b"")
    proc, result = _scan(tmp_path, str(SCRIPTS / "scan_images.py"), str(folder))
    assert proc.returncode == 1, proc.stderr
    assert _kinds(result) == {3: "exception", 5: "exception", 8: "exception"}
    for entry in result["bad"]:
        assert entry["path"] == str(folder / f"img{entry['index']:02d}.png")
    details = {entry["index"]: entry["detail"] for entry in result["bad"]}
    assert "truncated" in details[3] and "cannot identify image file" in details[5]


def test_range_and_sample_check_only_the_chosen_indices(tmp_path):
    proc, result = _scan(tmp_path, "--range", "10:30", str(SCRIPTS / "scan_planted.py"))
    assert proc.returncode == 1, proc.stderr
    assert result["scanned"] == 20
    assert _kinds(result) == {i: kind for i, kind in PLANTED.items() if 10 <= i < 30}

    proc, result = _scan(tmp_path, "--sample", "16", "--sample-timeout", "1", str(SCRIPTS / "scan_planted.py"))
    assert proc.returncode in (0, 1), proc.stderr
    assert result["scanned"] == 16 and result["selection"] == "random 16 (seed 0)"
    assert all(PLANTED[index] == kind for index, kind in _kinds(result).items())


def test_forkserver_workers_scan_and_a_crash_is_named(tmp_path):
    # A forkserver worker's parent is the fork server, not the scan: the workers once took that for "the scan is
    # gone" and exited at start (issue 24), as they would under Python 3.14's default start method.
    proc, result = _scan(tmp_path, "--start-method", "forkserver", "--range", "20:30", str(SCRIPTS / "scan_planted.py"))
    assert proc.returncode == 1, proc.stderr
    assert [scan["start_method"] for scan in result["loaders"]] == ["forkserver"] and result["scanned"] == 10
    assert _kinds(result) == {23: "exception", 29: "crash"}
    assert "worker killed by SIGSEGV" in proc.stdout


def test_iterable_dataset_is_scanned_in_order_and_reports_positions(tmp_path):
    proc, result = _scan(tmp_path, str(SCRIPTS / "scan_stream.py"))
    assert proc.returncode == 1, proc.stderr
    assert result["unit"] == "position" and result["iterable"]
    assert _kinds(result) == {7: "none", 12: "nan", 20: "shape"}
    assert result["scanned"] == 40 and result["total"] is None


def test_a_clean_dataset_exits_0(tmp_path):
    proc, result = _scan(tmp_path, "--workers", "1", str(SCRIPTS / "faulty_worker.py"), "ok")
    assert proc.returncode == 0, proc.stderr
    assert result["bad"] == [] and result["scanned"] == 64
    assert "no bad samples" in proc.stdout


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        (["scan_unusable.py", "len-fails"], "len(dataset) failed: RuntimeError: index file missing"),
        (["scan_unusable.py", "empty"], "the dataset is empty"),
        (["scan_unusable.py", "empty-stream"], "stream yielded no samples"),
        (["scan_unusable.py", "unpicklable"], "cannot be handed to spawn worker processes: TypeError: cannot pickle"),
        (["no_loader.py"], "without iterating a torch DataLoader"),
    ],
)
def test_datasets_that_cannot_be_scanned_are_explained(tmp_path, script, expected):
    proc, result = _scan(tmp_path, str(SCRIPTS / script[0]), *script[1:])
    assert proc.returncode == 2
    [error] = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert expected in error
    assert "hint:" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--range", "1-5"], "--range '1-5' is not a range"),
        (["--workers", "0"], "need at least 1 worker"),
        (["--sample-timeout", "soon"], "--sample-timeout"),
        (["--json", "/nonexistent/dir/out.json"], "cannot write into /nonexistent/dir"),
    ],
)
def test_usage_errors_exit_2_before_running_the_script(tmp_path, args, expected):
    proc = run_dlprobe(["scan", *args, str(SCRIPTS / "no_loader.py")], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and expected in proc.stderr.splitlines()[0]
    assert "hello without a loader" not in proc.stderr


def test_ctrl_c_keeps_what_was_found_and_still_writes_the_files(tmp_path):
    out, exclude = tmp_path / "scan.json", tmp_path / "bad.txt"
    command = [sys.executable, "-m", "dlprobe", "scan", "--json", str(out), "--exclude-out", str(exclude)]
    proc = subprocess.Popen(
        [*command, str(SCRIPTS / "scan_slow.py")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stderr is not None
    # Interrupt once both scan workers say they are past their first chunks (see tests/scripts/scan_slow.py)
    busy: set[str] = set()
    lines = []
    while len(busy) < 2:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        # findall, not startswith: another process's progress line may still share the line
        busy.update(re.findall(r"busy after 20 samples: pid (\d+)", line))
    assert len(busy) == 2, "".join(lines)
    assert any("scanning 400 samples" in line for line in lines), "".join(lines)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    result = json.loads(out.read_text())
    assert result["interrupted"] and not result["complete"]
    assert 0 < result["scanned"] < 400
    assert _kinds(result) == {3: "none"}
    from dlprobe.exclude import load_excluded

    assert load_excluded(exclude) == {3}


def test_every_loader_is_checked_by_default_so_a_clean_first_loader_hides_nothing(tmp_path):
    proc, result = _scan(tmp_path, str(SCRIPTS / "scan_two_loaders.py"))
    assert proc.returncode == 1, proc.stderr
    assert [(lo["total"], lo["scanned"]) for lo in result["loaders"]] == [(16, 16), (64, 64)]
    assert [(e["loader"], e["index"], e["kind"]) for e in result["bad"]] == [(None, 9, "exception")]
    assert not result["only_some_loaders_checked"]
    assert "64 samples): 1 bad sample" in proc.stdout and "ValueError: corrupt record 9" in proc.stdout
    assert "baseline" not in proc.stdout + proc.stderr  # checked from the loader objects: the script's loop never ran


def test_one_loader_asked_for_says_which_it_checked_and_how_to_check_the_next(tmp_path):
    proc, result = _scan(tmp_path, "--loader", "0", str(SCRIPTS / "scan_two_loaders.py"))
    assert proc.returncode == 0, proc.stderr
    assert result["loaders_checked"] == [0] and result["only_some_loaders_checked"]
    assert result["next_loader_command"].startswith("dlprobe scan --loader 1 ")
    text = " ".join(proc.stdout.split())  # the note wraps at the terminal's width
    assert "only loader 0 (__main__.Records, 16 samples) was checked" in text
    assert "1 other DataLoader(s), not checked: __main__.Records (64 samples)" in text
    assert "no bad samples in the 16 samples checked (other loaders not checked)" in text


def test_lightning_fit_checks_the_training_set_after_the_sanity_check_loader_and_ends_quietly(tmp_path):
    proc, result = _scan(tmp_path, str(SCRIPTS / "scan_lightning.py"))
    assert proc.returncode == 1, proc.stderr
    roles = [(lo["loader"], lo["role"], lo["total"]) for lo in result["loaders"]]
    assert roles == [(0, "Lightning's sanity-check validation loader", 16), (1, "Lightning's training loader", 64)]
    assert [(e["loader"], e["index"]) for e in result["bad"]] == [(1, 7)]
    output = proc.stdout + proc.stderr
    assert "Traceback" not in output and "SystemExit" not in output and "iter(combined_loader)" not in output
    # Asked for the sanity-check loader alone, the summary says plainly that the training set was not checked.
    proc, result = _scan(tmp_path, "--loader", "0", str(SCRIPTS / "scan_lightning.py"))
    assert proc.returncode == 0, proc.stderr
    assert result["only_some_loaders_checked"] and result["next_loader_command"].startswith("dlprobe scan --loader 1")
    text = " ".join(proc.stdout.split())
    assert "sanity-check validation loader) was checked" in text and "training loader" in text
