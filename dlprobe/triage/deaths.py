"""Causes of a worker's (or the training process's) death, from how the log says it died and the kernel's record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.measures.tracebacks import signal_cause
from dlprobe.system.kernlog import OomKill
from dlprobe.triage import scores as S
from dlprobe.triage.candidate import (
    CONFIRMED,
    FIX_NATIVE,
    FIX_OOM,
    FIX_SHM,
    LIKELY,
    NEAR_S,
    POSSIBLE,
    Candidate,
    first,
    make_finding,
    pids_text,
    plural,
)
from dlprobe.triage.facts import kernel_note, kill_dict, memory_facts, shm_facts, shm_here
from dlprobe.triage.logscan import LogScan
from dlprobe.triage.machine import MachineFacts
from dlprobe.triage.patterns import Match
from dlprobe.units import format_bytes

BIG_SHM = 2 << 30  # a /dev/shm this big is rarely what ran out
WORKER_COMMS = ("pt_data_worker", "pt_multiprocess", "pt_thread_data_w")


@dataclass
class Death:
    pid: int | None
    line: int
    signal: str | None = None
    signal_number: int | None = None
    exit_code: int | None = None
    text: str = ""


def _deaths(scan: LogScan) -> list[Death]:
    """One entry per dead worker pid, from S1/S2, or S3 when nothing says how it died."""
    deaths: dict[int, Death] = {}
    for m in scan.of("S1", "S2"):
        pid = m.fields["pid"]
        if pid not in deaths:
            deaths[pid] = Death(pid, m.line, m.fields.get("signal"), m.fields.get("signal_number"),
                                m.fields.get("exit_code"), m.text)  # fmt: skip
    for m in scan.of("S3"):
        for pid in m.fields["pids"]:
            deaths.setdefault(pid, Death(pid, m.line, text=m.text))
    return sorted(deaths.values(), key=lambda d: d.line)


def _markers(scan: LogScan, what: str) -> list[Match]:
    return [m for m in scan.of("S8") if m.fields.get("what") == what]


def _anon_rss_text(anon_rss: int) -> str:
    """The OOM record's anon-rss, said for what it is: every anonymous page the worker mapped, the ones it still
    shared with its parent included in full, so not what the worker itself added (its private memory, which the
    kernel's record does not give)."""
    return (f" The kernel's OOM record counts {format_bytes(anon_rss)} of anonymous pages mapped by the killed worker "
            "(anon-rss: pages still shared with its parent count in full; the worker's private memory is not in the "
            "record, `dlprobe run` measures it).")  # fmt: skip


def _oom_candidates(deaths: list[Death], scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                    failed_at: float, unknown: bool) -> list[Candidate]:  # fmt: skip
    pids = [d.pid for d in deaths if d.pid is not None]
    line = deaths[0].line
    by_pid = [k for k in kills if k.pid in pids]
    near = [k for k in kills if k.time is not None and abs(k.time - failed_at) <= NEAR_S
            and k.comm.startswith(WORKER_COMMS) and k not in by_pid]  # fmt: skip
    cgroup = machine.cgroup or {}
    how = "exited unexpectedly" if unknown else "was killed by SIGKILL"
    worker = f"DataLoader worker {plural(pids, 'pid', 'pids')} {pids_text(pids)}"
    facts = memory_facts(machine)
    kill_evidence = [kill_dict(k) for k in (by_pid or near)[:6]]
    messages = [d.text for d in deaths[:3]]
    common = {"pids": pids, "signal": None if unknown else "SIGKILL", "line": line, "messages": messages}
    if by_pid:
        where = "its memory cgroup hit its limit" if any(k.cgroup for k in by_pid) else "the machine ran out of memory"
        rss = max((k.anon_rss_bytes or 0) for k in by_pid)
        detail = (f"The kernel log ({machine.kernel.source}) has an OOM kill for {plural(by_pid, 'pid', 'pids')} "
                  f"{pids_text([k.pid for k in by_pid])}: {where}."
                  + (_anon_rss_text(rss) if rss else ""))  # fmt: skip
        finding = make_finding("worker-killed", f"{worker} killed by the kernel's OOM killer", detail, FIX_OOM,
                           CONFIRMED, cause="oom", kernel_kills=kill_evidence, **common, **facts)  # fmt: skip
        return [Candidate(S.OOM_KERNEL_RECORD if not unknown else S.OOM_KERNEL_RECORD_CAUSE_UNKNOWN, line, finding)]
    if unknown:
        detail = ("The log says the worker exited but not how (the cause message is missing, e.g. an older torch or "
                  "a cut log). " + kernel_note(machine, pids))  # fmt: skip
        fix = ("run it under `dlprobe run` (below): it records every worker's exit status and signal, its memory, "
               "and the kernel's OOM kills.")  # fmt: skip
        finding = make_finding("worker-killed", f"{worker} exited unexpectedly, cause not in the log", detail, fix,
                           POSSIBLE, cause="unknown", **common, **facts)  # fmt: skip
        return [Candidate(S.DEATH_CAUSE_UNKNOWN, line, finding)]
    if near:
        score, confidence = S.OOM_KILL_NEAR_IN_TIME, LIKELY
        detail = (f"SIGKILL is what the OOM killer sends, and the kernel log ({machine.kernel.source}) has an OOM kill "
                  f"of a DataLoader worker at about the time the log was written (pid {near[0].pid} there; pids differ "
                  "inside a container's pid namespace).")  # fmt: skip
    elif cgroup.get("oom_kill"):
        score, confidence = S.OOM_CGROUP_COUNTS_KILLS, LIKELY
        detail = (f"SIGKILL is what the OOM killer sends, and this memory cgroup ({cgroup.get('path')}) counts "
                  f"{cgroup['oom_kill']} OOM {plural([1] * int(cgroup['oom_kill']), 'kill', 'kills')}.")  # fmt: skip
    elif not machine.kernel.readable:
        score, confidence = S.OOM_NO_KERNEL_LOG, LIKELY
        detail = ("SIGKILL cannot be caught, so the worker printed nothing; it is what the kernel's OOM killer "
                  f"sends. No kernel log to confirm it: {machine.kernel.error}.")  # fmt: skip
    else:
        score, confidence = S.OOM_NOT_IN_KERNEL_LOG, POSSIBLE
        detail = "SIGKILL is what the kernel's OOM killer sends, but " + kernel_note(machine, pids)
    finding = make_finding("worker-killed", f"{worker} {how}: most likely out of memory", detail, FIX_OOM, confidence,
                       cause="oom", kernel_kills=kill_evidence, **common, **facts)  # fmt: skip
    out = [Candidate(score, line, finding)]
    if confidence == POSSIBLE:
        other = make_finding(
            "worker-killed", f"{worker} killed from outside (SIGKILL)",
            "Something other than the OOM killer can send SIGKILL: a job scheduler enforcing a time or memory limit "
            "(SLURM, Kubernetes eviction), a watchdog, or a `kill -9`.",
            "check the scheduler's job record (e.g. `sacct -j JOB -o State,ExitCode,MaxRSS`, `kubectl describe pod`) "
            "for a limit or eviction at the time of the failure.",
            POSSIBLE, cause="external-kill", **common)  # fmt: skip
        out.append(Candidate(S.KILLED_FROM_OUTSIDE, line, other))
    return out


def signal_candidates(scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                       failed_at: float) -> list[Candidate]:  # fmt: skip
    deaths = _deaths(scan)
    groups: dict[str, list[Death]] = {}
    for death in deaths:
        if death.exit_code is not None:
            key = "exit"
        elif death.signal is None:
            key = "unknown"
        else:
            key = signal_cause(death.signal)  # the worker-killed vocabulary of findings/deaths/worker_deaths
        groups.setdefault(key, []).append(death)
    # torch's C handler writes its own line for SIGBUS/SIGSEGV/SIGFPE even when the chained errors are cut off.
    for what, key in (("bus error", "bus"), ("segmentation fault", "segfault"), ("floating-point exception", "fpe")):
        markers = _markers(scan, what)
        if markers and key not in groups:
            groups[key] = [Death(None, markers[0].line, text=markers[0].text)]
    out: list[Candidate] = []
    for key, group in groups.items():
        if key in ("oom", "unknown"):
            out += _oom_candidates(group, scan, machine, kills, failed_at, unknown=key == "unknown")
        elif key == "bus":
            out += _bus_candidates(group, scan, machine)
        else:
            out += _native_candidates(key, group, scan)
    return out


def _death_evidence(group: list[Death], scan: LogScan, marker: str | None) -> dict[str, Any]:
    pids = [d.pid for d in group if d.pid is not None]
    markers = _markers(scan, marker) if marker else []
    return {
        "pids": pids,
        "signal": group[0].signal and _signame(group[0]),
        "line": min([d.line for d in group] + [m.line for m in markers]),
        "messages": [d.text for d in group[:3]] + [m.text for m in markers[:1]],
    }


def _signame(death: Death) -> str:
    names = {9: "SIGKILL", 7: "SIGBUS", 11: "SIGSEGV", 6: "SIGABRT", 8: "SIGFPE", 15: "SIGTERM", 2: "SIGINT"}
    return names.get(death.signal_number or 0, death.signal or "?")


def _workers_text(pids: list[int]) -> str:
    return f"DataLoader worker {plural(pids, 'pid', 'pids')} {pids_text(pids)}" if pids else "A DataLoader worker"


def _bus_candidates(group: list[Death], scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    ev = _death_evidence(group, scan, "bus error")
    ev["signal"] = "SIGBUS"
    big = bool(machine.shm and machine.shm["total"] >= BIG_SHM)
    detail = ("Workers put every batch into shared memory (/dev/shm); when that tmpfs is full, the first write to a "
              "page it cannot back raises SIGBUS, and torch says so in its message." + shm_here(machine))  # fmt: skip
    if big:
        detail += " That is roomy, so if the run was on this machine a memory-mapped file is as likely (next cause)."
    shm = make_finding("shm-exhausted", f"{_workers_text(ev['pids'])} died of SIGBUS: /dev/shm most likely full",
                   detail, FIX_SHM, LIKELY, cause="shm", **ev, **shm_facts(machine))  # fmt: skip
    native = make_finding(
        "worker-killed", f"{_workers_text(ev['pids'])} died of SIGBUS in native code",
        "SIGBUS also comes from reading a memory-mapped file past its end: an `np.memmap`/mmap'd dataset or "
        "checkpoint file that was truncated or rewritten while in use, or a network filesystem that went away.",
        "check the files the dataset memory-maps (sizes, whether another job rewrites them); " + FIX_NATIVE,
        POSSIBLE, cause="bus", **ev)  # fmt: skip
    return [
        Candidate(S.SHM_BUS_ERROR_ROOMY if big else S.SHM_BUS_ERROR, ev["line"], shm),
        Candidate(S.MAPPED_FILE_BUS_ERROR_ROOMY if big else S.MAPPED_FILE_BUS_ERROR, ev["line"], native),
    ]


def _native_candidates(key: str, group: list[Death], scan: LogScan) -> list[Candidate]:
    marker = {"segfault": "segmentation fault", "fpe": "floating-point exception"}.get(key)
    ev = _death_evidence(group, scan, marker)
    pids = ev["pids"]
    who = _workers_text(pids)
    if key == "exit":
        code = group[0].exit_code
        finding = make_finding(
            "worker-killed", f"{who} exited with code {code}",
            f"The worker process ended itself with exit code {code}: a native library's fatal-error path "
            "(`exit()`/`os._exit()`) or `sys.exit` in code that bypasses the worker's exception handling. PyTorch "
            "loses the details across processes.",
            "rerun with `num_workers=0` so the exit happens in the main process, or trace it with "
            "`strace -f -e trace=exit_group`; look for `os._exit`/`sys.exit` in the dataset and its libraries.",
            LIKELY, cause="exit", exit_code=code, **ev)  # fmt: skip
        return [Candidate(S.WORKER_EXIT_CODE, ev["line"], finding)]
    if key == "signal":
        finding = make_finding(
            "worker-killed", f"{who} was stopped by {ev['signal']}",
            f"The worker got {group[0].signal} ({ev['signal']}) from outside: a scheduler preempting or ending the "
            "job, a timeout wrapper, or someone's `kill`.",
            "check the job scheduler's record for a preemption, time limit or cancellation at that time.",
            LIKELY, cause="signal", **ev)  # fmt: skip
        return [Candidate(S.STOPPED_BY_SIGNAL, ev["line"], finding)]
    native_lines = [m.text for m in scan.of("native-abort")][:3]
    what = {"segfault": ("segmentation fault", "SIGSEGV: native code read or wrote memory it does not own"),
            "abort": ("abort", "SIGABRT: native code called abort() (a failed C/C++ assertion, an uncaught C++ "
                      "exception, or heap corruption detected by malloc)"),
            "fpe": ("floating-point exception", "SIGFPE: an integer division by zero in native code"),
            "sigill": ("illegal instruction", "SIGILL: code built for a newer CPU")}[key]  # fmt: skip
    finding = make_finding(
        "worker-killed", f"{who} crashed in native code ({what[0]})",
        f"The worker died of {what[1]}, while loading or collating a sample. Python code alone cannot do this; "
        "a C extension (image/video decoder, HDF5, lmdb, OpenCV, a custom op) did.",
        FIX_NATIVE, LIKELY, cause=key, native_messages=native_lines, **ev)  # fmt: skip
    return [Candidate(S.NATIVE_CRASH, ev["line"], finding)]


def _jobs_own_kills(pid_text: Any, kills: list[OomKill], failed_at: float,
                    ) -> tuple[list[OomKill], list[OomKill], int | None]:  # fmt: skip
    """(the kernel's kills that are this job's, those near in time that are not, the pid the shell's line names).

    The shell's `line 1: 13104 Killed  python train.py` names the killed process: a kill of that pid is the job's,
    at any time; a kill of another pid near in time is someone else's, unless pids cannot be compared (this
    process sees the log's pids through another pid namespace than the kernel's)."""
    near = [k for k in kills if k.time is not None and abs(k.time - failed_at) <= NEAR_S]
    shell_pid = int(pid_text) if pid_text is not None and str(pid_text).isdigit() else None
    if shell_pid is None or _in_pid_namespace():
        return near, [], shell_pid
    named = [k for k in kills if k.pid == shell_pid]
    return named, [k for k in near if k.pid != shell_pid], shell_pid


def _in_pid_namespace() -> bool:
    """This process runs in a pid namespace below the kernel's (a container): the kernel log's pids are not its."""
    try:
        with open("/proc/self/status") as f:
            line = next((x for x in f if x.startswith("NSpid:")), "")
    except OSError:
        return False
    return len(line.split()) > 2


def main_killed_candidates(scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                            failed_at: float) -> list[Candidate]:  # fmt: skip
    matches = scan.of("main-killed")
    if not matches or scan.of("S1", "S2", "S3"):
        return []
    m = first(matches)
    near, ruled_out, shell_pid = _jobs_own_kills(m.fields.get("pid"), kills, failed_at)
    confidence, score = (LIKELY, S.MAIN_OOM_NEAR_IN_TIME) if near else (POSSIBLE, S.MAIN_OOM_UNCONFIRMED)
    if near and shell_pid is not None and near[0].pid == shell_pid:
        confidence = CONFIRMED
    detail = ("The training process itself was killed with SIGKILL (the shell prints `Killed`, launchers exit code "
              "-9); that is what the kernel's OOM killer does when the main process is the biggest one.")  # fmt: skip
    if near:
        where = "its memory cgroup at its limit" if near[0].cgroup else "the machine out of memory"
        named = " (the pid the shell's line names)" if near[0].pid == shell_pid else " at about that time"
        detail += f" The kernel log has an OOM kill of pid {near[0].pid} ({near[0].comm}){named}: {where}."
    else:
        detail += " " + kernel_note(machine, [shell_pid] if shell_pid is not None else [])
    if ruled_out:
        which = f"{plural(ruled_out, 'pid', 'pids')} {pids_text([k.pid for k in ruled_out])}"
        detail += (f" Not this job's: the OOM {plural(ruled_out, 'kill', 'kills')} of {which} near that time "
                   f"(another pid than the {shell_pid} the shell's line names: another process or another user's "
                   "job).")  # fmt: skip
    return [Candidate(score, m.line, make_finding(
        "main-killed", "The training process was killed (SIGKILL), most likely out of memory", detail,
        "see which process grows under `dlprobe run` (below): the main process (batches or losses kept alive, "
        "a dataset loaded into memory) or the workers (copy-on-access). " + FIX_OOM.split(". ", 1)[1],
        confidence, cause="oom", line=m.line, message=m.text, kernel_kills=[kill_dict(k) for k in near[:6]],
        **memory_facts(machine)))]  # fmt: skip
