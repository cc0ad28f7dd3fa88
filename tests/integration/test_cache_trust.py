"""The README's shared records on real DataLoader workers (fork and spawn), with another local user (uid 65534) who
got to the cache first: their entries are refused and their pickles never run; the user's own cache still works."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from dlprobe.fixes import cache_dir as layout
from dlprobe.fixes.records import pack
from tests.conftest import SCRIPTS, needs_small_shm, run_with_small_shm
from tests.unit.test_fix_cache_trust import OTHER_UID, Planted, as_root, plant_entry

SCRIPT = SCRIPTS / "shared_records_trust.py"
KEY = "train-records-v1"  # the README's example
EXPECTED = "labels=4500 indices=499500"  # sums over the 1,000 records the script packs


def _run(method: str, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, layout.CACHE_DIR_ENV: str(cache)}
    return subprocess.run([sys.executable, str(SCRIPT), method, *args], capture_output=True, text=True, timeout=300,
                          env=env)  # fmt: skip


def _plant_command(root: str, marker: Path) -> str:
    """A shell command that leaves another user's directory `root` (mode 0777) holding a planted entry under KEY."""
    code = (f"import os; from pathlib import Path; from dlprobe.fixes.records import pack; "
            f"from tests.unit.test_fix_cache_trust import Planted, plant_entry; root = Path({root!r}); "
            f"plant_entry(root, {KEY!r}, pack([Planted(Path({str(marker)!r}))] * 1000)); "
            f"root.chmod(0o777); os.chown(root, {OTHER_UID}, {OTHER_UID})")  # fmt: skip
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


@as_root
def test_another_users_entry_under_the_readmes_key_is_refused_and_never_unpickled_by_workers(tmp_path: Path):
    marker = tmp_path / "planted-code-ran"
    cache = tmp_path / "cache"
    plant_entry(cache, KEY, pack([Planted(marker)] * 1000))
    proc = _run("fork", "plain", cache=cache)
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode == 1, proc.stdout
    assert f"UnsafeCacheError: refusing to use the dlprobe.fixes cache entry {cache / KEY}.json: it belongs to uid " \
           f"{OTHER_UID}" in proc.stderr  # fmt: skip
    assert f"remove it (`dlprobe cache clear {KEY}`" in proc.stderr


@as_root
def test_an_entry_replaced_by_another_users_before_spawn_workers_attach_is_refused_there(tmp_path: Path):
    marker = tmp_path / "planted-code-ran"
    planted = tmp_path / "planted"
    plant_entry(planted, KEY, pack([Planted(marker)] * 1000))
    proc = _run("spawn", "swap", str(planted), cache=tmp_path / "cache")
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode == 1, proc.stdout
    assert "DataLoader worker" in proc.stderr and "UnsafeCacheError" in proc.stderr  # raised in the workers
    assert f"it belongs to uid {OTHER_UID}" in proc.stderr


@as_root
@needs_small_shm
def test_another_users_directories_at_the_default_location_are_refused_never_read(tmp_path: Path):
    """The reported attack: another user made /dev/shm/dlprobe-cache (and the per-user name) first and left an
    entry under the README's key. Run in a private /dev/shm so that no other test or user sees these folders."""
    marker = tmp_path / "planted-code-ran"
    uid = os.geteuid()
    plant = " && ".join(
        _plant_command(f"/dev/shm/{name}", marker) for name in ("dlprobe-cache", f"dlprobe-cache-{uid}")
    )
    run = f"env -u {layout.CACHE_DIR_ENV} {shlex.quote(sys.executable)} {shlex.quote(str(SCRIPT))} spawn plain"
    proc = run_with_small_shm("64M", f"{plant} && {run}", timeout=300)
    assert not marker.exists(), "the planted pickle ran"
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"refusing to use the dlprobe.fixes cache directory /dev/shm/dlprobe-cache-{uid}: it belongs to uid " \
           f"{OTHER_UID}" in proc.stderr  # fmt: skip


@needs_small_shm
def test_the_users_own_cache_serves_the_same_records_to_fork_and_spawn_workers_across_runs():
    """The default location, in a private /dev/shm: the first run (fork workers) packs, the second (spawn workers,
    which attach by key) maps what it packed; both read every record; the directory and its files are private."""
    uid = os.geteuid()
    python, script = shlex.quote(sys.executable), shlex.quote(str(SCRIPT))
    root = f"/dev/shm/dlprobe-cache-{uid}"
    command = (f"unset {layout.CACHE_DIR_ENV}; {python} {script} fork plain && {python} {script} spawn plain && "
               f"stat -c '%a %u %n' {root} {root}/* {root}/.mac-key")  # fmt: skip
    proc = run_with_small_shm("64M", command, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[:2] == [f"fork packed=True {EXPECTED}", f"spawn packed=False {EXPECTED}"]
    modes = {line.split()[2]: line.split()[:2] for line in lines[2:]}
    assert modes[root] == ["700", str(uid)]
    assert {name: mode for name, mode in modes.items() if name != root} == {
        f"{root}/{name}": ["600", str(uid)] for name in (f"{KEY}.npy", f"{KEY}.json", f"{KEY}.lock", ".mac-key")
    }


@pytest.fixture(autouse=True)
def _no_cache_dir_from_the_caller(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(layout.CACHE_DIR_ENV, raising=False)
