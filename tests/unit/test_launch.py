"""How targets are launched: `--` and `-m` on the command line, the injected PYTHONPATH, node ranks, identities,
and the supervisor's view of several ranks' loaders."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from dlprobe.commands.options import LaunchCommand, _dashes_before_target
from dlprobe.errors import DlprobeError
from dlprobe.in_training import identity
from dlprobe.in_training.injected import sitecustomize
from dlprobe.rundir import schema
from dlprobe.supervisor import launch
from dlprobe.supervisor.run_watch import Progress
from dlprobe.supervisor.sampler import Sampler


def _run_command() -> LaunchCommand:
    from dlprobe.cli import app

    command = typer.main.get_command(app).commands["run"]  # type: ignore[attr-defined]
    assert isinstance(command, LaunchCommand)
    return command


@pytest.mark.parametrize(
    ("args", "dashes"),
    [
        (["--", "torchrun", "train.py"], True),
        (["-q", "--out", "d", "--", "torchrun"], True),
        (["--out", "--", "train.py"], False),  # "--" is the value of --out here
        (["--hang-timeout=5", "--", "bash", "x.sh"], True),
        (["train.py", "--", "x"], False),  # after the script, everything is the script's
        (["-m", "pkg.train", "--", "x"], False),
        (["train.py"], False),
    ],
)
def test_dashes_count_only_before_the_target(args: list[str], dashes: bool) -> None:
    assert _dashes_before_target(_run_command(), args) is dashes


def test_node_rank_from_a_torchrun_command_line() -> None:
    assert launch.node_rank(["torchrun", "--nnodes", "2", "--node-rank", "1", "t.py"]) == 1
    assert launch.node_rank(["torchrun", "--node_rank=3", "t.py"]) == 3
    assert launch.node_rank(["torchrun", "--nproc-per-node", "2", "t.py"]) is None
    assert launch.node_rank(["torchrun", "--node-rank", "$NODE", "t.py"]) is None


def test_run_names() -> None:
    assert launch.run_name(schema.LAUNCH_COMMAND, "torchrun", ["--nproc-per-node", "2", "dir/train.py"]) == "train"
    assert launch.run_name(schema.LAUNCH_COMMAND, "bash", ["-c", "exit 3"]) == "bash"
    assert launch.run_name(schema.LAUNCH_MODULE, "mypkg.train", []) == "train"
    assert launch.run_name(schema.LAUNCH_SCRIPT, "a/b.py", []) == "b"


def test_injected_pythonpath_keeps_the_users_after_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTHONPATH", raising=False)
    env: dict[str, str] = {}
    launch.inject(env, schema.LAUNCH_MODULE, "pkg.train")
    assert env["PYTHONPATH"] == str(launch.INJECTED_DIR)
    # the process this one starts is the target: it installs the hooks before python runs pkg.train
    assert env[schema.TARGET_ENV] == f"{os.getpid()}:module:pkg.train"
    assert (launch.INJECTED_DIR / "sitecustomize.py").is_file()
    assert env[schema.PACKAGE_PATH_ENV] == str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv("PYTHONPATH", "/a:/b")
    launch.inject(env, schema.LAUNCH_SCRIPT, "train.py")
    assert env["PYTHONPATH"] == f"{launch.INJECTED_DIR}{os.pathsep}/a:/b"


def test_a_pythonpath_too_long_to_extend_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/x" * (launch.MAX_ENV_STRING // 2))
    with pytest.raises(DlprobeError, match="PYTHONPATH is too long"):
        launch.inject({}, schema.LAUNCH_SCRIPT, "train.py")


def test_missing_commands_and_modules() -> None:
    with pytest.raises(DlprobeError, match="command not found: no-such-launcher"):
        launch.check_command(["no-such-launcher", "x"])
    with pytest.raises(DlprobeError, match="command not found"):
        launch.check_command(["./not/here.sh"])
    launch.check_command(["bash", "-c", "true"])
    with pytest.raises(DlprobeError, match="no module named no_such_pkg"):
        launch.check_module("no_such_pkg.train")
    with pytest.raises(DlprobeError, match="not a module name"):
        launch.check_module("train.py/x")
    launch.check_module("json.tool")


def test_the_injected_sitecustomize_spells_the_schema_names() -> None:
    # It cannot import dlprobe.rundir.schema (that would cost every Python process of the job), so it repeats them.
    assert sitecustomize.RUN_DIR_ENV == schema.RUN_DIR_ENV
    assert sitecustomize.PACKAGE_PATH_ENV == schema.PACKAGE_PATH_ENV
    assert sitecustomize.TARGET_ENV == schema.TARGET_ENV
    assert sitecustomize.EVENTS_FILE == schema.EVENTS_FILE
    assert sitecustomize.EV_PROBE_ERROR == schema.EV_PROBE_ERROR


STUB_TORCH = {
    "torch/__init__.py": "",
    "torch/utils/__init__.py": "",
    "torch/utils/data/__init__.py": "",
    "torch/utils/data/dataloader.py": "class DataLoader:\n    pass\n\n\nclass _BaseDataLoaderIter:\n    pass\n",
    "torch/utils/data/_utils/__init__.py": "",
    "torch/utils/data/_utils/fetch.py": "class _MapDatasetFetcher:\n    def fetch(self, i):\n        return i\n\n\n"
    "class _IterableDatasetFetcher(_MapDatasetFetcher):\n    pass\n",
}


def test_sitecustomize_finds_dlprobe_through_the_package_path(tmp_path: Path) -> None:
    """A python with dlprobe on no path of its own (the base interpreter, not this venv) still gets the hooks from
    the path the supervisor passes, and patches torch's DataLoader module when it is imported (a stub torch here)."""
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists() or Path(sys.base_prefix) == Path(sys.prefix):
        pytest.skip("needs a virtual environment whose base interpreter lacks dlprobe")
    for name, text in STUB_TORCH.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    code = (
        "import importlib.util, sys\n"
        "print(importlib.util.find_spec('dlprobe') is None)\n"
        "import torch.utils.data.dataloader as d\n"
        "print(getattr(d.DataLoader, '_dlprobe_patched', False), sys.modules['dlprobe'].__path__[0])\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"PYTHONPATH": f"{launch.INJECTED_DIR}{os.pathsep}{tmp_path}", schema.RUN_DIR_ENV: str(tmp_path),
                schema.PACKAGE_PATH_ENV: str(launch.PACKAGE_DIR.parent)})  # fmt: skip
    proc = subprocess.run([str(base), "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True", str(launch.PACKAGE_DIR)] and proc.stderr == ""
    assert not (tmp_path / schema.EVENTS_FILE).exists()  # no probe_error: nothing failed


def test_identity_from_torchrun_and_lightning_environments(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "NODE_RANK"):
        monkeypatch.delenv(name, raising=False)
    assert {k: identity.current()[k] for k in ("rank", "world_size", "node_rank")} == {
        "rank": None,
        "world_size": None,
        "node_rank": None,
    }
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("NODE_RANK", "1")  # Lightning's name; torchrun's GROUP_RANK wins when both are there
    me = identity.current()
    assert (me["rank"], me["local_rank"], me["world_size"], me["node_rank"]) == (3, 1, 4, 1)
    monkeypatch.setenv("GROUP_RANK", "0")
    assert identity.current()["node_rank"] == 0
    assert me["host"] and me["ppid"] == os.getppid()


def test_two_ranks_loader_0_do_not_collide_in_the_supervisor() -> None:
    progress = Progress()
    sampler = Sampler(os.getpid(), io.StringIO(), None)
    progress.feed(
        [
            {"ev": "process", "pid": 101, "rank": 0},
            {"ev": "process", "pid": 102, "rank": 1},
            {"ev": "epoch", "pid": 101, "loader": 0, "workers": [{"pid": 201, "worker_id": 0}]},
            {"ev": "epoch", "pid": 102, "loader": 0, "workers": [{"pid": 202, "worker_id": 0}]},
            {"ev": "batches", "pid": 101, "loader": 0, "waits": [0.5], "total": 7},
            {"ev": "batches", "pid": 102, "loader": 0, "waits": [0.25], "total": 3},
        ],
        sampler,
    )
    assert progress.batches == {(101, 0): 7, (102, 0): 3}
    assert progress.workers == {201: (101, 0, 0), 202: (102, 0, 0)}
    assert progress.mains(999) == [101, 102]
    assert {101, 102, 201, 202} <= sampler.known and sampler.workers == {201, 202}
    assert "rank0/loader0: 7 batches rank1/loader0: 3 batches" in progress.status(1.0, sampler).plain


def test_hotspot_sampler_counts_the_wait_of_one_rank_not_the_sum(tmp_path: Path) -> None:
    from dlprobe.supervisor.stack_recorder import StackRecorder

    recorder = StackRecorder(os.getpid(), tmp_path)
    batches = [
        {"ev": "batches", "pid": pid, "t": 10.0, "waits": [5.0, 1.0, 1.0], "total": 3} for pid in (101, 102, 103)
    ]
    recorder.observe(batches, 10.5)  # too soon to start py-spy: only the bookkeeping runs
    assert recorder.wait_s == 2.0  # each rank's first wait is start-up; three ranks waiting 2 s side by side
    assert not recorder.started


def test_the_target_is_started_as_plain_python_starts_it() -> None:
    # No wrapper module of dlprobe's: __file__, sys.argv, sys.path, the stack and the exit status are python's own.
    assert launch.target_command(schema.LAUNCH_SCRIPT, "train.py", ["--lr", "1"]) == [
        sys.executable,
        "train.py",
        "--lr",
        "1",
    ]
    assert launch.target_command(schema.LAUNCH_MODULE, "pkg.train", ["x"]) == [sys.executable, "-m", "pkg.train", "x"]
    assert launch.target_command(schema.LAUNCH_COMMAND, "torchrun", ["t.py"]) == ["torchrun", "t.py"]
