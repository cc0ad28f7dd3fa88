"""cgroup reading on fake v1 and v2 trees: the tightest memory limit on the way to the root, and where it sits."""

from pathlib import Path

import pytest

from dlprobe.system import cgroup

GiB = 1 << 30


def _v2(tmp_path: Path, limits: dict[str, str]) -> tuple[Path, list[tuple[str, str]]]:
    root = tmp_path / "v2"
    (root / "kubepods" / "pod1" / "ctr").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    for rel in ("kubepods", "kubepods/pod1", "kubepods/pod1/ctr"):
        (root / rel / "memory.max").write_text(limits.get(rel, "max") + "\n")
        (root / rel / "memory.current").write_text(f"{len(rel)}\n")  # tells the cgroups apart
    (root / "kubepods/pod1/ctr/memory.events").write_text("low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\n")
    return root, [("", "/kubepods/pod1/ctr")]


def _v1(tmp_path: Path, limits: dict[str, int]) -> tuple[Path, list[tuple[str, str]]]:
    root = tmp_path / "v1"
    mount = root / "memory"
    (mount / "docker" / "abc").mkdir(parents=True)
    unlimited = 9223372036854771712  # what v1 shows for "no limit"
    for rel in ("", "docker", "docker/abc"):
        (mount / rel / "memory.limit_in_bytes").write_text(f"{limits.get(rel, unlimited)}\n")
        (mount / rel / "memory.usage_in_bytes").write_text(f"{100 + len(rel)}\n")
    (mount / "docker/abc/memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    return root, [("12", "pids:/docker/abc"), ("4", "/docker/abc")]


def _state(root: Path, member_of: list[tuple[str, str]], version: int):
    if version == 1:
        member_of = [("memory", path) for _, path in member_of if ":" not in path]
    where = cgroup.controller_dir("memory", root=root, member_of=member_of)
    assert where is not None and where[2] == version
    return where, cgroup.memory_state(where)


def test_v2_limit_on_the_parent_only_binds_the_child(tmp_path):
    root, member_of = _v2(tmp_path, {"kubepods/pod1": str(2 * GiB)})
    where, state = _state(root, member_of, 2)
    assert where[0] == root / "kubepods/pod1/ctr"
    assert state["limit"] == 2 * GiB and state["limit_dir"] == str(root / "kubepods/pod1")
    assert state["usage"] == len("kubepods/pod1")  # the usage of the cgroup that holds the limit
    assert state["oom_kill"] == 2


def test_v2_tighter_child_wins(tmp_path):
    root, member_of = _v2(tmp_path, {"kubepods": str(8 * GiB), "kubepods/pod1": str(2 * GiB),
                                     "kubepods/pod1/ctr": str(GiB)})  # fmt: skip
    _, state = _state(root, member_of, 2)
    assert state["limit"] == GiB and state["limit_dir"] == str(root / "kubepods/pod1/ctr")


def test_v2_unlimited_everywhere(tmp_path):
    root, member_of = _v2(tmp_path, {})
    _, state = _state(root, member_of, 2)
    assert state["limit"] is None and state["limit_dir"] is None
    assert state["usage"] == len("kubepods/pod1/ctr")  # then the process's own cgroup


def test_v1_limit_on_the_parent_only_binds_the_child(tmp_path):
    root, member_of = _v1(tmp_path, {"docker": 3 * GiB})
    where, state = _state(root, member_of, 1)
    assert where[0] == root / "memory/docker/abc"
    assert state["limit"] == 3 * GiB and state["limit_dir"] == str(root / "memory/docker")
    assert state["oom_kill"] == 1


def test_v1_tighter_child_wins_and_huge_values_are_unlimited(tmp_path):
    root, member_of = _v1(tmp_path, {"docker": 3 * GiB, "docker/abc": GiB})
    _, state = _state(root, member_of, 1)
    assert (state["limit"], state["limit_dir"]) == (GiB, str(root / "memory/docker/abc"))
    root, member_of = _v1(tmp_path / "none", {})
    _, state = _state(root, member_of, 1)
    assert state["limit"] is None and state["limit_dir"] is None


def test_v1_container_without_a_cgroup_namespace_reads_its_mount_root(tmp_path):
    """/proc/self/cgroup names the host's path, but the container sees its own cgroup mounted as the root."""
    root, _ = _v1(tmp_path, {"": GiB})
    where = cgroup.controller_dir("memory", root=root, member_of=[("memory", "/docker/not-mounted-here")])
    assert where is not None and where[0] == root / "memory"
    assert cgroup.memory_state(where)["limit"] == GiB


@pytest.mark.parametrize("line", ["0::/user.slice/session-1.scope", "4:memory:/process_api/x", "9:name=systemd:/"])
def test_memberships_reads_proc_cgroup_lines(tmp_path, monkeypatch, line):
    fake = tmp_path / "proc" / "42"
    fake.mkdir(parents=True)
    (fake / "cgroup").write_text(line + "\n")
    real = Path

    def fake_path(p, *rest):
        return real(str(p).replace("/proc/42", str(fake)), *rest)

    monkeypatch.setattr(cgroup, "Path", fake_path)
    [(controllers, path)] = cgroup.memberships(42)
    assert f"{controllers}:{path}" == line.split(":", 1)[1]


def test_no_memory_cgroup_is_none(tmp_path):
    assert cgroup.controller_dir("memory", root=tmp_path, member_of=[("", "/x")]) is None
    assert cgroup.memory_state(None) is None


def test_page_cache_the_kernel_drops_first_is_read_from_the_limits_cgroup(tmp_path):
    MiB = 1 << 20
    root, member_of = _v2(tmp_path, {"kubepods/pod1": str(2 * GiB)})
    # file includes tmpfs (shmem); mapped, dirty and written-back pages are not dropped at once
    (root / "kubepods/pod1/memory.stat").write_text(
        f"anon {300 * MiB}\nfile {120 * MiB}\nfile_mapped {20 * MiB}\nfile_dirty {5 * MiB}\n"
        f"file_writeback 0\nshmem {10 * MiB}\n"
    )
    where, _ = _state(root, member_of, 2)
    assert cgroup.reclaimable_cache(where) == 85 * MiB
    root1, member_of1 = _v1(tmp_path, {"docker": 3 * GiB})
    (root1 / "memory/docker/memory.stat").write_text(
        f"cache {9 * MiB}\nmapped_file {MiB}\nshmem 0\ntotal_cache {107 * MiB}\ntotal_mapped_file {20 * MiB}\n"
        "total_shmem 0\ntotal_dirty 0\ntotal_writeback 0\n"
    )
    where1, _ = _state(root1, member_of1, 1)
    assert cgroup.reclaimable_cache(where1) == 87 * MiB  # the hierarchy's total_ rows, as usage_in_bytes counts it
    (root1 / "memory/docker/memory.stat").unlink()
    assert cgroup.reclaimable_cache(where1) is None and cgroup.reclaimable_cache(None) is None
