"""`dlprobe cache list|clear` on a real cache directory, with a real process mapping an entry."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dlprobe.fixes.records import pack
from tests.conftest import run_dlprobe
from tests.unit.test_fix_cache_trust import OTHER_UID, Planted, as_root, plant_entry

HOLDER = """
import sys, numpy as np
from dlprobe.fixes import shm_array
arr = shm_array("held-v1", lambda: np.arange(1 << 20, dtype=np.int64))
print(int(arr.sum()), flush=True)
sys.stdin.read()  # keeps the array mapped until the test closes stdin
"""


def test_list_and_clear_show_sizes_and_mappers_and_refuse_mapped_entries(tmp_path: Path):
    cache = tmp_path / "cache"
    env = {"DLPROBE_CACHE_DIR": str(cache)}
    empty = run_dlprobe(["cache", "list"], tmp_path, env=env)
    assert empty.returncode == 0 and f"No cached arrays in {cache}" in empty.stdout

    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, **env})  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip()  # built and mapped
        listed = run_dlprobe(["cache", "list"], tmp_path, env=env)
        assert listed.returncode == 0, listed.stderr
        [row] = [line for line in listed.stdout.splitlines() if "held-v1" in line]
        assert "8.0 MiB" in row and "<i8 1048576" in row and str(holder.pid) in row
        assert "1 arrays, 8.0 MiB; 1 mapped by running processes." in listed.stdout

        refused = run_dlprobe(["cache", "clear", "held-v1"], tmp_path, env=env)
        assert refused.returncode == 1
        assert f"not removed: held-v1 (pids {holder.pid}) still mapped" in refused.stderr
        assert "--force" in refused.stderr and (cache / "held-v1.npy").exists()
    finally:
        holder.communicate("")

    unknown = run_dlprobe(["cache", "clear", "nope"], tmp_path, env=env)
    assert unknown.returncode == 2
    assert unknown.stderr.startswith("error: no cached array 'nope'") and "hint: list the keys" in unknown.stderr
    slash = run_dlprobe(["cache", "clear", "a/b"], tmp_path, env=env)
    assert slash.returncode == 2 and "cache key 'a/b' is not valid" in slash.stderr and "Traceback" not in slash.stderr

    cleared = run_dlprobe(["cache", "clear"], tmp_path, env=env)
    assert cleared.returncode == 0 and "removed held-v1 (8.0 MiB)" in cleared.stdout
    assert list(cache.iterdir()) == []


@as_root
def test_another_users_entry_is_listed_as_untrusted_and_cleared_and_another_users_directory_is_refused(tmp_path: Path):
    cache = tmp_path / "cache"
    env = {"DLPROBE_CACHE_DIR": str(cache)}
    marker = tmp_path / "planted-code-ran"
    plant_entry(cache, "train-records-v1", pack([Planted(marker)]))
    listed = run_dlprobe(["cache", "list"], tmp_path, env=env)
    assert listed.returncode == 0, listed.stderr
    assert "untrusted entry train-records-v1: refusing to use the dlprobe.fixes cache entry" in listed.stdout
    assert f"belongs to uid {OTHER_UID}" in listed.stdout and "dlprobe cache clear train-records-v1" in listed.stdout

    cleared = run_dlprobe(["cache", "clear", "train-records-v1"], tmp_path, env=env)
    assert cleared.returncode == 0, cleared.stderr
    assert "removed train-records-v1" in cleared.stdout and "untrusted" in cleared.stdout
    assert not (cache / "train-records-v1.npy").exists() and not marker.exists()

    os.chown(cache, OTHER_UID, OTHER_UID)
    refused = run_dlprobe(["cache", "list"], tmp_path, env=env)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"error: refusing to use the dlprobe.fixes cache directory {cache}: it belongs "
                                     f"to uid {OTHER_UID}")  # fmt: skip
    assert "hint: " in refused.stderr and "Traceback" not in refused.stderr
