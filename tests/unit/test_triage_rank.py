"""Ranking of triage causes on hand-written logs and fake machine facts; the kernel OOM-line parser."""

from __future__ import annotations

import io
import re
from pathlib import Path

from dlprobe.system.kernlog import parse_oom_lines
from dlprobe.torch_text import KEPT_BATCHES_FIX
from dlprobe.triage.logscan import scan_stream
from dlprobe.triage.machine import KernelLog, MachineFacts
from dlprobe.triage.rank import diagnose, reproduce

MiB = 1024 * 1024
NOW = 1_700_000_000.0
BOOT = NOW - 1000.0

# What this machine's kernel printed for a real cgroup OOM kill of a DataLoader worker.
DMESG = [
    "[  895.795425] oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,"
    "oom_memcg=/dlprobe-t,task_memcg=/dlprobe-t,task=pt_data_worker,pid=6565,uid=0",
    "[  895.795449] Memory cgroup out of memory: Killed process 6565 (pt_data_worker) total-vm:1043728kB, "
    "anon-rss:384484kB, file-rss:21872kB, shmem-rss:0kB, UID:0 pgtables:1036kB oom_score_adj:0",
    "[ 1200.000001] Out of memory: Killed process 777 (python) total-vm:9043728kB, anon-rss:8000000kB, file-rss:0kB",
]

TRACEBACK = 'Traceback (most recent call last):\n  File "/home/u/train.py", line 84, in <module>\n    for b in dl:\n'


def scan_of(text: str):
    return scan_stream(io.BytesIO(text.encode()), "test.log")


def machine(kills=(), readable=True, shm_total=64 * MiB, cgroup=None, nofile=(1024, 4096)) -> MachineFacts:
    kernel = KernelLog("dmesg", kills=list(kills)) if readable else KernelLog(None, "dmesg: Operation not permitted")
    return MachineFacts(True, kernel, {"total": shm_total, "used": 0}, cgroup, nofile, 16 << 30)


def killed(pid: int, signal: str = "Killed") -> str:
    return (
        TRACEBACK + f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: {signal}. \n\n"
        "The above exception was the direct cause of the following exception:\n\n" + TRACEBACK
        + f"RuntimeError: DataLoader worker (pid(s) {pid}) exited unexpectedly\n"
    )  # fmt: skip


def top(findings):
    f = findings[0]
    return f.code, f.evidence.get("cause"), f.evidence.get("confidence")


def test_parse_oom_lines_merges_the_oom_kill_and_killed_process_lines():
    kills = parse_oom_lines(DMESG, boot_time=BOOT)
    assert [(k.pid, k.comm, k.cgroup) for k in kills] == [(6565, "pt_data_worker", True), (777, "python", False)]
    assert kills[0].memcg == "/dlprobe-t"
    assert kills[0].anon_rss_bytes == 384484 * 1024
    assert kills[0].time == BOOT + 895.795425
    assert parse_oom_lines(["Jan 1 host kernel: random line", "oom_reaper: reaped process 6565"]) == []


def test_sigkill_with_a_kernel_oom_kill_for_that_pid_is_confirmed_oom():
    kills = parse_oom_lines(DMESG, boot_time=BOOT)
    findings = diagnose(scan_of(killed(6565)), machine(kills), NOW)
    assert top(findings) == ("worker-killed", "oom", "confirmed")
    ev = findings[0].evidence
    assert ev["pids"] == [6565] and ev["signal"] == "SIGKILL"
    assert ev["kernel_kills"][0]["pid"] == 6565
    assert len([f for f in findings if f.severity == "error"]) == 1  # S1 and S3 are one death, not two


def test_sigkill_without_kernel_evidence_ranks_oom_first_then_an_outside_kill():
    # the kernel's only worker OOM kill is another pid, from long before this log was written
    findings = diagnose(scan_of(killed(4242)), machine(parse_oom_lines(DMESG, BOOT)), NOW + 5000)
    assert top(findings) == ("worker-killed", "oom", "possible")
    assert findings[1].evidence["cause"] == "external-kill"
    assert "no OOM kill for 4242" in findings[0].detail


def test_sigkill_with_an_unreadable_kernel_log_is_likely_oom_and_says_why_unconfirmed():
    findings = diagnose(scan_of(killed(4242)), machine(readable=False), NOW)
    assert top(findings) == ("worker-killed", "oom", "likely")
    assert "Operation not permitted" in findings[0].detail


def test_a_worker_oom_kill_near_the_logs_time_counts_across_pid_namespaces():
    lines = ["[  990.000000] Memory cgroup out of memory: Killed process 99123 (pt_data_worker) anon-rss:1kB"]
    findings = diagnose(scan_of(killed(12)), machine(parse_oom_lines(lines, BOOT)), NOW)
    assert top(findings) == ("worker-killed", "oom", "likely")
    assert findings[0].evidence["kernel_kills"][0]["pid"] == 99123


def test_cgroup_oom_kill_count_makes_oom_likely():
    findings = diagnose(scan_of(killed(12)), machine(cgroup={"limit": 1 << 30, "oom_kill": 3, "path": "/x"}), NOW)
    assert top(findings) == ("worker-killed", "oom", "likely")
    assert findings[0].evidence["cgroup_oom_kills"] == 3


def test_exit_code_only_with_kernel_oom_for_that_pid_is_oom():
    text = TRACEBACK + "RuntimeError: DataLoader worker (pid(s) 6565) exited unexpectedly\n"
    findings = diagnose(scan_of(text), machine(parse_oom_lines(DMESG, BOOT)), NOW)
    assert top(findings) == ("worker-killed", "oom", "confirmed")
    findings = diagnose(scan_of(text), machine(), NOW)
    assert top(findings) == ("worker-killed", "unknown", "possible")


def test_bus_error_ranks_shm_first_and_native_mmap_second():
    text = (
        "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm).\n"
        "\x00" + killed(325, "Bus error")
    )
    findings = diagnose(scan_of(text), machine(shm_total=64 * MiB), NOW)
    assert top(findings) == ("shm-exhausted", "shm", "likely")
    assert findings[0].evidence["pids"] == [325] and findings[0].evidence["signal"] == "SIGBUS"
    assert findings[0].evidence["line"] == 1  # the worker's own ERROR line comes first
    assert "Docker's default" in findings[0].detail
    assert findings[1].evidence["cause"] == "bus"
    # the same words as `dlprobe run` says for this death (tests/unit/test_failure_findings.py)
    assert (findings[1].code, findings[1].evidence["signal"], findings[1].evidence["pids"]) == (
        "worker-killed", "SIGBUS", [325])  # fmt: skip


def test_segfault_marker_alone_still_names_the_crash():
    text = "ERROR: Unexpected segmentation fault encountered in worker.\n\x00"
    findings = diagnose(scan_of(text), machine(), NOW)
    assert top(findings) == ("worker-killed", "segfault", "likely")


def test_abort_carries_the_native_messages_before_it():
    text = "terminate called after throwing an instance of 'std::bad_alloc'\n" + killed(77, "Aborted")
    findings = diagnose(scan_of(text), machine(), NOW)
    assert top(findings)[:2] == ("worker-killed", "abort")
    assert findings[0].evidence["native_messages"] == [
        "terminate called after throwing an instance of 'std::bad_alloc'"
    ]
    assert reproduce(scan_of(text), findings)["command"].startswith("PYTHONFAULTHANDLER=1 dlprobe run ")


def worker_error(exc: str, message: str, worker: int = 0) -> str:
    return (
        TRACEBACK + f"{exc}: Caught {exc} in DataLoader worker process {worker}.\n"
        "Original Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374, in _worker_loop\n'
        '  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 273, in collate\n'
        '  File "/home/u/data.py", line 40, in __getitem__\n'
        f"{exc}: {message}\n"
    )  # fmt: skip


def test_worker_exception_is_a_bad_sample_with_index_worker_and_frame():
    findings = diagnose(scan_of(worker_error("KeyError", "'missing label for sample 1234'", 1)), machine(), NOW)
    assert top(findings) == ("bad-sample", "exception", "confirmed")
    ev = findings[0].evidence
    assert ev["exception"] == "KeyError" and ev["worker_id"] == 1 and ev["index"] == 1234
    assert ev["frame"] == "/home/u/data.py:40 in __getitem__"


def test_shm_allocation_failure_in_a_worker_is_shm_not_a_bad_sample():
    msg = "unable to allocate shared memory(shm) for file </torch_6606_151_0>: No space left on device (28)"
    findings = diagnose(scan_of(worker_error("RuntimeError", msg)), machine(shm_total=8 * MiB), NOW)
    assert top(findings) == ("shm-exhausted", "shm", "confirmed")
    assert findings[0].evidence["worker_ids"] == [0]
    assert findings[0].evidence["shm_total_bytes"] == 8 * MiB
    assert [f.code for f in findings if f.severity == "error"] == ["shm-exhausted"]


def test_collate_and_cuda_errors_in_workers_get_their_own_cause():
    findings = diagnose(scan_of(worker_error("RuntimeError", "Trying to resize storage that is not resizable")),
                        machine(), NOW)  # fmt: skip
    assert top(findings) == ("collate-error", "shape-mismatch", "confirmed")
    findings = diagnose(scan_of(worker_error("AttributeError", "'NoneType' object has no attribute 'numel'")),
                        machine(), NOW)  # fmt: skip
    assert top(findings)[:2] == ("collate-error", "none-sample")
    cuda = "Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must use the 'spawn'"
    assert top(diagnose(scan_of(worker_error("RuntimeError", cuda)), machine(), NOW))[0] == "cuda-fork"


def test_stack_shape_error_counts_only_when_it_came_out_of_the_loader():
    msg = "stack expects each tensor to be equal size, but got [3, 64, 64] at entry 0 and [3, 64, 60] at entry 5"
    in_loader = (
        TRACEBACK + '  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py", line 2, in c\n'
        f"RuntimeError: {msg}\n"
    )  # fmt: skip
    assert top(diagnose(scan_of(in_loader), machine(), NOW))[:2] == ("collate-error", "shape-mismatch")
    elsewhere = TRACEBACK + f'  File "/home/u/model.py", line 2, in forward\nRuntimeError: {msg}\n'
    assert diagnose(scan_of(elsewhere), machine(), NOW) == []


def test_timeout_with_the_tokenizers_banner_names_tokenizers_first():
    text = (
        "huggingface/tokenizers: The current process just got forked, after parallelism has already been used. "
        "Disabling parallelism to avoid deadlocks...\n"
        + TRACEBACK + "RuntimeError: DataLoader timed out after 20 seconds\n"
    )  # fmt: skip
    findings = diagnose(scan_of(text), machine(), NOW)
    assert [(f.code, f.evidence["cause"]) for f in findings] == [("worker-hang", "tokenizers-fork"),
                                                                  ("worker-hang", "unknown")]  # fmt: skip
    assert findings[0].evidence["timeout_s"] == 20.0
    command = reproduce(scan_of(text), findings)["command"]
    assert command == "dlprobe run --hang-timeout 10 /home/u/train.py ..."


def test_too_many_open_files_reports_the_limit():
    text = TRACEBACK + (
        "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase "
        "the limit using `ulimit -n` in the shell or change the sharing strategy by calling "
        "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code\n"
    )
    findings = diagnose(scan_of(text), machine(nofile=(256, 4096)), NOW)
    assert top(findings)[0] == "too-many-open-files"
    assert findings[0].evidence["nofile_soft"] == 256 and "256" in findings[0].detail
    # The same cause and fix as `dlprobe run`'s fd-leak of a loop keeping batches (dlprobe/torch_text.py):
    # `.numpy()` of a received tensor still holds its storage's descriptor, so it is no fix.
    assert findings[0].evidence["cause"] == "main-receiving" and KEPT_BATCHES_FIX in findings[0].fix
    assert "`.numpy()` still shares the storage" in findings[0].fix


def test_a_shell_killed_line_is_the_main_process_killed():
    findings = diagnose(scan_of("epoch 1 step 5\nKilled\n"), machine(parse_oom_lines(DMESG[2:], BOOT)), NOW)
    assert top(findings) == ("main-killed", "oom", "likely")
    assert findings[0].evidence["kernel_kills"][0]["comm"] == "python"


def test_the_shells_killed_line_names_the_pid_and_another_jobs_kill_near_in_time_is_ruled_out():
    log = "epoch 1 step 5\n/bin/sh: line 1: 13104 Killed                  python train.py\n"
    other = parse_oom_lines(["[ 1200.000001] Out of memory: Killed process 12315 (python) total-vm:9043728kB, "
                             "anon-rss:8000000kB, file-rss:0kB"], BOOT)  # fmt: skip
    findings = diagnose(scan_of(log), machine(other), NOW)
    assert top(findings) == ("main-killed", "oom", "possible")  # no kill of 13104 in the kernel log
    assert not findings[0].evidence.get("kernel_kills")  # 12315 is not this job's
    assert "pid 12315 near that time (another pid than the 13104 the shell's line names" in findings[0].detail
    own = parse_oom_lines([DMESG[2].replace("process 777", "process 13104")], BOOT)
    findings = diagnose(scan_of(log), machine(own + other), NOW)
    assert top(findings) == ("main-killed", "oom", "confirmed")
    assert [k["pid"] for k in findings[0].evidence["kernel_kills"]] == [13104]
    assert "pid 13104 (python) (the pid the shell's line names)" in findings[0].detail


def test_warnings_alone_are_not_failures():
    text = (
        "UserWarning: This DataLoader will create 8 worker processes in total. Our suggested max number of worker "
        "in current system is 2, which is smaller than what this DataLoader is going to create.\n"
    )
    findings = diagnose(scan_of(text), machine(), NOW)
    assert [(f.code, f.severity) for f in findings] == [("too-many-workers", "warning")]


def test_the_reproduce_command_quotes_the_script_and_admits_when_it_is_unknown():
    text = (
        TRACEBACK.replace("/home/u/train.py", "/home/u/my runs/train.py")
        + "RuntimeError: DataLoader timed out after 3 seconds\n"
    )
    scan = scan_of(text)
    assert "'/home/u/my runs/train.py'" in reproduce(scan, diagnose(scan, machine(), NOW))["command"]
    bare = scan_of("RuntimeError: DataLoader worker (pid 5) exited unexpectedly with exit code 3. Details are lost\n")
    result = reproduce(bare, diagnose(bare, machine(), NOW))
    assert result["script"] is None and "does not show the script" in result["note"]


def test_pytorchs_iterable_length_warning_names_the_sharded_line_stream():
    warning = (
        "UserWarning: Length of IterableDataset <__main__.DS object at 0x7f> was reported to be 100(when accessing "
        "len(dataloader)), but 200 samples have been fetched.\n"
    )
    [finding] = [f for f in diagnose(scan_of(warning), machine(), NOW) if f.code == "iterable-duplicates"]
    assert "get_worker_info()" in finding.fix and "ShardedLineStream" in finding.fix


# stderr of a real torchrun job (2 ranks, 2 workers each, in a 1.5 GiB memory cgroup) whose rank 1's worker the
# kernel's OOM killer ended: tests/integration/test_job_report.py's scenario, as `dlprobe run` saved it.
TORCHRUN_OOM = Path(__file__).parents[1] / "fixtures" / "logs" / "torchrun_worker_oom_rank1.log"
TORCHRUN_KILL = (
    "[ 5744.738520] Memory cgroup out of memory: Killed process 27735 (pt_data_worker) total-vm:2943728kB, "
    "anon-rss:1258484kB, file-rss:21872kB, shmem-rss:0kB, UID:0 pgtables:2036kB oom_score_adj:0"
)


def test_a_torchrun_ranks_oom_kill_is_named_with_its_rank_from_the_lines_prefix():
    findings = diagnose(scan_of(TORCHRUN_OOM.read_text()), machine(parse_oom_lines([TORCHRUN_KILL], BOOT)), NOW)
    assert top(findings) == ("worker-killed", "oom", "confirmed")
    ev = findings[0].evidence
    assert findings[0].title == "DataLoader worker pid 27735 killed by the kernel's OOM killer (rank 1)"
    assert (ev["rank"], ev["rank_from"], ev["local_rank"]) == ("rank 1", "line prefix", 1)


def test_without_line_prefixes_torchruns_root_cause_names_the_rank_not_its_other_failures():
    # The "Failures:" block before it names rank 0 (stopped with SIGTERM after rank 1 failed): not the cause.
    text = re.sub(r"^\[rank\d\]: ", "", TORCHRUN_OOM.read_text(), flags=re.MULTILINE)
    findings = diagnose(scan_of(text), machine(parse_oom_lines([TORCHRUN_KILL], BOOT)), NOW)
    assert findings[0].evidence["rank"] == "rank 1" and findings[0].evidence["rank_from"] == "torchrun root cause"
    assert findings[0].title.endswith("(rank 1)")


def test_a_log_of_one_process_names_no_rank():
    findings = diagnose(scan_of(killed(6565)), machine(parse_oom_lines(DMESG, boot_time=BOOT)), NOW)
    assert "rank" not in findings[0].evidence and "rank" not in findings[0].title


WORKER_EMFILE = (
    TRACEBACK + '  File "/usr/lib/python3/site-packages/torch/_utils.py", line 794, in reraise\n    raise exception\n'
    "OSError: Caught OSError in DataLoader worker process 1.\n"
    "Original Traceback (most recent call last):\n"
    '  File "/usr/lib/python3/site-packages/torch/utils/data/_utils/fetch.py", line 54, in fetch\n'
    '  File "/home/u/data.py", line 29, in __getitem__\n'
    "    return torch.from_numpy(np.load(f))\n"
    '  File "/usr/lib/python3/site-packages/numpy/lib/_npyio_impl.py", line 483, in load\n'
    '  File "/usr/lib/python3/site-packages/numpy/lib/_format_impl.py", line 847, in read_array\n'
    "OSError: [Errno 24] Too many open files\n"
)


def test_too_many_open_files_in_a_worker_is_the_workers_own_files_not_torchs_sharing():
    [finding] = [f for f in diagnose(scan_of(WORKER_EMFILE), machine(nofile=(256, 4096)), NOW)
                 if f.code == "too-many-open-files"]  # fmt: skip
    assert finding.evidence["cause"] == "worker-descriptors" and finding.evidence["worker_ids"] == [1]
    assert finding.evidence["frame"] == "/home/u/data.py:29 in __getitem__"
    assert finding.evidence["raised_in"].endswith("_npyio_impl.py:483 in load")
    assert "worker 1" in finding.title and "main process" not in finding.title
    assert "sharing_strategy" not in finding.fix and "file_descriptor" not in finding.detail
    # The limit quoted is this machine's, said to be: the log does not give the job's.
    assert finding.evidence["nofile_read_from"] == "this machine"
    assert "on this machine (where triage runs, not necessarily where the job ran) it is 256" in finding.detail
