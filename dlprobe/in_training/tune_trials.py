"""Runs inside the training process (via the takeover hook): rebuilds the script's DataLoader per trial and times it."""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
import warnings
from typing import Any

from dlprobe.in_training import hand_over, loader_registry, probe_errors, start_method_choice, takeover
from dlprobe.in_training.event_log import get_log
from dlprobe.in_training.trial_memory import TrialMemory
from dlprobe.loader_model.limits import WORKER_CAP
from dlprobe.loader_model.memory_growth import epoch_share
from dlprobe.loader_model.worker_memory import memory_for_workers, workers_that_fit
from dlprobe.rundir.schema import (
    EV_TRIAL_END,
    EV_TRIAL_SKIPPED,
    EV_TRIAL_START,
    EV_TUNE_CONFIRM,
    EV_TUNE_LOADER,
    EV_TUNE_WORKERS_STOP,
    EXIT_NO_BATCHES,
    TAKEOVER_ENV,
    TUNE_CONFIG_ENV,
)
from dlprobe.system import cgroup, kernlog, procmem
from dlprobe.tune.loop import keeps_up, loop_seconds
from dlprobe.tune.plan import DUPLICATE_SHARE, completed, later_stages, merge_repeat, oom_killed, trial
from dlprobe.tune.search import next_step, to_confirm

IN_FLIGHT_ROUNDS = 3  # a trial times this many times the batches in flight (or --batches, if more)...
# A trial ends once its steady rate is known to this relative standard error (2%: well inside the search's 8% noise
# between two trials of one count), after at least MIN_ROUNDS rounds of one batch per worker.
SETTLED_SE = 0.02
MIN_ROUNDS = 5
# A trial's steady window (settled or not) lasts at least this long: the load of other work on a shared machine comes
# and goes over tenths of a second, and a shorter window reads a passing burst of it as the loader's rate. On 16 cores
# a fast loader's 84 batches took 0.08 s past the batches in flight: 14 workers timed at 7,110 samples/s where 600
# batches of the same loader ran at 10,600, and 32 read faster than their samples' own sleep allows.
MIN_STEADY_S = 0.5
MIN_TRIAL_S = 1.5  # a trial gets at least this long, from its first batch (its workers' start-up is bounded apart)
EXIT_TRIAL_HUNG = 4
SEARCH_TRIALS_LEFT = 4  # a search trial's share of the budget left: the trials still to come are not known yet
HANG_GRACE_S = 10.0  # beyond its time cap, a num_workers=0 trial is declared hung


def _emit(ev: str, **fields: Any) -> None:
    log = get_log()
    if log is not None:
        log.emit(ev, **fields)


def _accelerator() -> bool:
    import torch

    acc = getattr(torch, "accelerator", None)
    try:
        return bool(acc.is_available()) if acc is not None else bool(torch.cuda.is_available())
    except Exception:
        return False


def describe(loader: Any) -> dict[str, Any]:
    """What the trials keep from the script's loader, and what the user should know about it."""
    from torch.utils.data import IterableDataset
    from torch.utils.data._utils.collate import default_collate

    iterable = isinstance(loader.dataset, IterableDataset)
    custom_sampler = loader.batch_size is None and loader.batch_sampler is not None
    custom_collate = loader.collate_fn is not default_collate
    batches_per_epoch = _epoch_batches(loader)
    try:
        dataset_len: int | None = len(loader.dataset)
    except TypeError:
        dataset_len = None
    notes = []
    if iterable:
        notes.append(
            "IterableDataset: every worker runs its own __iter__, so trials with more workers only help if the "
            "dataset shards by get_worker_info(); trials that yield repeated samples are marked and not recommended"
        )
    if custom_sampler:
        notes.append("custom batch_sampler: reused as is by every trial")
    if custom_collate:
        name = getattr(loader.collate_fn, "__qualname__", type(loader.collate_fn).__name__)
        notes.append(f"custom collate_fn {name}: reused as is (a trial fails if a spawn worker cannot pickle it)")
    return {
        "iterable": iterable,
        "custom_batch_sampler": custom_sampler,
        "custom_collate_fn": custom_collate,
        "batch_size": loader.batch_size,
        "batches_per_epoch": batches_per_epoch,
        "dataset_len": dataset_len,
        "start_method": loader.multiprocessing_context.get_start_method() if loader.multiprocessing_context else None,
        "num_workers": loader.num_workers,
        "prefetch_factor": loader.prefetch_factor,
        "pin_memory": bool(loader.pin_memory),
        "persistent_workers": bool(loader.persistent_workers),
        "notes": notes,
    }


def _epoch_batches(loader: Any) -> int | None:
    """Batches in an epoch of the script's loader, None where it has no length (an iterable dataset without one)."""
    try:
        return len(loader)
    except TypeError:
        return None


def build(loader: Any, num_workers: int, prefetch_factor: int | None, pin_memory: bool, timeout: float) -> Any:
    """A new DataLoader over the same dataset, sampling, collate and worker set-up, with the trial's settings."""
    from torch.utils.data import DataLoader, IterableDataset

    common: dict[str, Any] = {
        "num_workers": num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": pin_memory,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context if num_workers else None,
        "generator": loader.generator,
    }
    if num_workers:
        # Persistent workers let a small dataset be cycled without paying worker start-up each pass.
        common.update(prefetch_factor=prefetch_factor, persistent_workers=True, timeout=timeout)
    if isinstance(loader.dataset, IterableDataset):
        return DataLoader(loader.dataset, batch_size=loader.batch_size, drop_last=loader.drop_last, **common)
    if loader.batch_sampler is not None:
        return DataLoader(loader.dataset, batch_sampler=loader.batch_sampler, **common)
    return DataLoader(loader.dataset, batch_size=None, sampler=loader.sampler, **common)


def _samples_in(batch: Any, default: int) -> int:
    for leaf in _leaves(batch):
        shape = getattr(leaf, "shape", None)
        if shape is not None and len(shape) > 0:
            return int(shape[0])
    return default


def _leaves(batch: Any, depth: int = 0) -> list[Any]:
    if depth > 4:
        return []
    if isinstance(batch, dict):
        return [leaf for v in batch.values() for leaf in _leaves(v, depth + 1)]
    if isinstance(batch, (list, tuple)):
        return [leaf for v in batch for leaf in _leaves(v, depth + 1)]
    return [batch]


def measure(loader: Any, spec: dict[str, Any], batches: int, time_cap: float, deadline: float) -> dict[str, Any]:
    """Time one trial: first batch, then throughput after the pipeline has filled."""
    nw, pf = spec["num_workers"], spec["prefetch_factor"]
    # n workers x prefetch_factor batches are in flight before the first arrives, and they arrive at once: timed over
    # fewer batches than a few times that, 32 workers read as many times faster than they can be.
    batches = max(batches, IN_FLIGHT_ROUNDS * nw * (pf or 2))
    # A hung trial is given up after its share of the budget plus a grace, but never past the sweep's deadline.
    give_up = max(1.0, min(time_cap + HANG_GRACE_S, deadline - time.time()))
    batch_timeout = round(min(max(5.0, time_cap), give_up), 1)
    trial_loader = build(loader, nw, pf, spec["pin_memory"], timeout=batch_timeout)
    start = time.perf_counter()  # the trial's epoch starts as its loader is iterated
    # The trial's window (time_cap) runs from its first batch: the workers' start-up before it is not the loader's
    # rate, and under forkserver or spawn (each worker imports `__main__` again) it can take longer than the window
    # itself. Their start is bounded by the sweep's deadline instead of a batch's timeout.
    window_from, window_s = start, time_cap
    stamps: list[float] = []
    counts: list[int] = []
    passes = 0
    result: dict[str, Any] = {"status": "ok", "error": None}
    iterator = None
    busy_from: tuple[float, dict[int, tuple[float, float | None]], float] | None = None
    clock, handover_from, timed = hand_over.HandOverClock(), 0.0, False  # the hand-over seconds, from busy_from on
    # Workers are bounded by the DataLoader's own timeout; the main process needs a watchdog of its own.
    watchdog = _Watchdog(spec, give_up) if nw == 0 else None
    oom_before = _oom_count()
    held_before = _held()  # the job before the trial's workers
    boot_start, kmsg = kernlog.since_boot(), kernlog.open_at_end()  # the kernel's records from this trial on
    worker_pids: set[int] = set()
    memory = TrialMemory()  # the workers' memory as the trial goes, for the search's memory cap
    try:
        iterator = iter(trial_loader)
        result["loader_id"] = loader_registry.probe_id(trial_loader)
        worker_pids = {w.pid for w in getattr(iterator, "_workers", None) or []}
        if start_method_choice.current_method(trial_loader) != "fork":
            # spawn/forkserver workers import the script again before their first batch (seconds under load): their
            # start is bounded by the sweep's deadline. Forked workers start at once: a first batch that takes longer
            # than the batch timeout is a hang (a lock held across fork), not a start, and must not take the budget.
            _batch_timeout(iterator, round(max(batch_timeout, deadline - time.time()), 1))
        timed = nw > 0 and hand_over.attach_to(iterator, clock)
        pass_start = 0  # batches before this pass of the dataset
        while len(stamps) < batches or _short(stamps, nw, pf):
            try:
                batch = next(iterator)
            except StopIteration:
                passes += 1
                if not stamps or len(stamps) == pass_start or time.perf_counter() - window_from > window_s:
                    break  # nothing to cycle (a pass that yielded nothing: a one-shot stream), or out of time
                pass_start = len(stamps)
                iterator = iter(trial_loader)
                timed = timed and hand_over.attach_to(iterator, clock)
                continue
            stamps.append(time.perf_counter())
            if nw and len(stamps) == 1:
                memory.start(sorted(worker_pids))
            if len(stamps) == 1:  # a start that took the budget leaves the window what is left of it, or MIN_TRIAL_S
                window_from, window_s = stamps[0], min(time_cap, max(MIN_TRIAL_S, deadline - time.time()))
                _batch_timeout(iterator, batch_timeout)  # started: a batch that takes longer than this is a hang
            # The workers' CPU from the batch the rate is timed from (_throughput): the batches in flight at the start
            # arrive at once with a fresh worker's first, slower samples in them, and CPU read over a window the rate
            # is not read over gives a CPU per sample that is off by their share. From the first batch until then.
            if nw and (busy_from is None or len(stamps) == nw * (pf or 2) + 1):
                # (the main process's CPU less the probe's memory reads so far: probe_cpu_s below takes out the rest)
                busy_from = (time.perf_counter(), _busy_seconds(iterator), time.process_time() - memory.cpu_s)
                handover_from = clock.seconds
            counts.append(_samples_in(batch, loader.batch_size or 1))
            del batch
            if stamps[-1] - window_from > window_s:
                # A rate needs batches past those in flight at the start (they arrive together, with the workers'
                # start-up in them): a trial cut off before that has no steady rate to give.
                result["status"] = "ok" if len(stamps) >= max(3, nw * (pf or 2) + 3) else "too-slow"
                break
            if _settled(stamps, nw, pf):
                result["settled"] = True
                break
    except Exception as exc:
        message = f"{type(exc).__name__}: {exc}".strip()
        result["status"] = "hung" if "timed out" in message else "crashed"
        result["error"] = message.splitlines()[0][:300] if message else type(exc).__name__
        if result["status"] == "crashed":
            oom, kmsg = _oom_killed(oom_before, kmsg, boot_start, worker_pids), None
            if oom:  # PyTorch says "exited unexpectedly"; the kernel says why. Larger trials would be killed too.
                result["status"], result["error"] = "oom", "killed by the kernel's OOM killer: " + result["error"]
    finally:
        if kmsg is not None:
            os.close(kmsg)
        if watchdog is not None:
            watchdog.cancel()
        memory.stop()
        if busy_from is not None and result["status"] == "ok":
            handover = clock.seconds - handover_from if timed else None
            # The trial's epoch clock as tune's results read it (from its start to its last batch); every worker has
            # built its first batch once nw batches have come: its steady part, as run reads it, from there.
            fraction = epoch_share(len(stamps), _epoch_batches(loader), ended=passes > 0)
            projected = memory.worker_bytes(start, stamps[-1], fraction, stamps[min(nw, len(stamps)) - 1])
            result.update(_workers_now(iterator, *busy_from, held_before, handover, projected, memory.cpu_s))
        repeated = loader_registry.repeated_samples(trial_loader)
        if result["status"] == "ok" and repeated and repeated[0] >= DUPLICATE_SHARE * max(1, repeated[1]):
            # Said here too, not only when the supervisor reads the trials: the search must not follow its rate.
            result["status"] = "duplicates"
        del iterator
        stopping = time.perf_counter()
        _shutdown(trial_loader)
        result["shutdown_s"] = round(time.perf_counter() - stopping, 3)  # part of tune's time, not of the rate
    result.update(_throughput(start, stamps, counts, nw, pf))
    result["passes"] = passes
    return result


def _batch_timeout(iterator: Any, seconds: float) -> None:
    """How long the iterator waits for its next batch before it raises "DataLoader timed out" (torch reads its
    `_timeout` at every batch; a loader without workers has none)."""
    if isinstance(getattr(iterator, "_timeout", None), (int, float)) and getattr(iterator, "_timeout", 0) > 0:
        iterator._timeout = seconds


def _settled(stamps: list[float], nw: int, pf: int | None) -> bool:
    """Whether the steady rate is known to within SETTLED_SE: the time per round of batches (one per worker) over
    the rounds since the pipeline filled, its standard error against its mean, after at least MIN_ROUNDS rounds.

    Rounds, not single batches: with n workers batches arrive in clumps, so single gaps are not independent."""
    warm = _warm(len(stamps), nw, pf)
    size = max(2, nw)
    rounds = (len(stamps) - 1 - warm) // size
    if rounds < MIN_ROUNDS or (len(stamps) - 1 - warm) % size:
        return False
    if stamps[-1] - stamps[warm] < MIN_STEADY_S:
        return False
    spans = [stamps[warm + (k + 1) * size] - stamps[warm + k * size] for k in range(rounds)]
    mean = sum(spans) / rounds
    if mean <= 0:
        return False
    sd = (sum((x - mean) ** 2 for x in spans) / (rounds - 1)) ** 0.5
    return bool(sd / mean / rounds**0.5 <= SETTLED_SE)


def _short(stamps: list[float], nw: int, pf: int | None) -> bool:
    """Whether the steady window (past the batches in flight at the start) is still under MIN_STEADY_S."""
    warm = _warm(len(stamps), nw, pf)
    return len(stamps) < warm + 2 or stamps[-1] - stamps[warm] < MIN_STEADY_S


def _warm(made: int, nw: int, pf: int | None) -> int:
    """Batches prefetched while the first was made arrive at once: the steady rate is timed after them."""
    return min(max(1, nw * (pf or 2)), made // 2)


def _oom_count() -> int | None:
    state = cgroup.memory_state(cgroup.memory_dir())
    return state.get("oom_kill") if state else None


def _oom_killed(before: int | None, kmsg: int | None, boot_start: float, pids: set[int]) -> bool:
    """Whether the kernel's OOM killer ended this trial: the cgroup counted a kill since it began, or the kernel log
    names one of its workers (closes `kmsg`). Neither readable: not known, so not said."""
    after = _oom_count()
    counted = before is not None and after is not None and after > before
    records = kernlog.read_records(fd=kmsg) if kmsg is not None else None
    named = bool(records and kernlog.oom_kills(pids, boot_start - 1.0, records)["kills"])
    return counted or named


def _busy_seconds(iterator: Any) -> dict[int, tuple[float, float | None]]:
    """Each worker's seconds on a CPU and queued for one so far, by pid: schedstat's nanoseconds where the kernel
    keeps them (a trial of a second or two is a few 10 ms ticks of /proc/PID/stat), else stat's ticks."""
    out: dict[int, tuple[float, float | None]] = {}
    for worker in getattr(iterator, "_workers", None) or []:
        sched = procmem.read_process_schedstat(worker.pid)
        if sched is not None:
            out[worker.pid] = sched
            continue
        stat = procmem.read_stat(worker.pid)
        if stat is not None:
            out[worker.pid] = (stat[2], None)
    return out


def _workers_now(
    iterator: Any,
    since: float,
    busy_then: dict[int, tuple[float, float | None]],
    main_cpu_then: float,
    held_before: int | None = None,
    handover_s: float | None = None,
    projected_worker: int | None = None,
    probe_cpu_s: float = 0.0,
) -> dict[str, Any]:
    """The trial's workers at its end: the share of their time they wanted a CPU (and were on one), the main
    process's CPU share over the same window (receiving batches competes with the workers for the cores) and the
    share it spent taking batches off the result queue (`handover_s` seconds of the window), and how
    many workers the memory left would hold: the largest worker's memory at the end of a full epoch
    (`projected_worker`, in_training/trial_memory.py, as tune's results and `run` project it; else its private
    memory now) against MemAvailable or the cgroup's room, whichever is tighter. `probe_cpu_s`: the CPU the probe's
    memory reads took in this process, not the main process's."""
    wall = time.perf_counter() - since
    main_cpu = max(0.0, time.process_time() - probe_cpu_s - main_cpu_then)
    busy_now = _busy_seconds(iterator)
    common = [pid for pid in busy_then if pid in busy_now]
    out: dict[str, Any] = {"worker_busy_share": None, "worker_cpu_share": None, "worker_runq_share": None,
                           "main_cpu_share": None, "main_handover_share": None,
                           "workers_that_fit_memory": None}  # fmt: skip
    precise = all(busy_then[pid][1] is not None and busy_now[pid][1] is not None for pid in common)
    # stat's CPU time ticks in 10 ms steps: a shorter window says little; schedstat counts nanoseconds
    if common and wall > (0.05 if precise else 0.2):
        cpu = sum(busy_now[pid][0] - busy_then[pid][0] for pid in common) / (len(common) * wall)
        runq = sum((busy_now[pid][1] or 0.0) - (busy_then[pid][1] or 0.0) for pid in common) / (len(common) * wall)
        out["worker_busy_share"] = round(min(1.0, cpu + runq), 3)
        # Queued for a core is also other jobs' load on a shared machine: the model's cores cap reads the CPU alone.
        out["worker_cpu_share"] = round(min(1.0, cpu), 3)
        out["worker_runq_share"] = round(min(1.0, runq), 3) if precise else None
        out["main_cpu_share"] = round(main_cpu / wall, 3)
        if handover_s is not None:
            out["main_handover_share"] = round(min(1.0, handover_s / wall), 3)
    uss = [m["uss"] for m in (procmem.read_smaps_rollup(pid) for pid in common) if m]
    available = procmem.system_memory()["available"] or None
    state = cgroup.memory_state(cgroup.memory_dir())
    limit, held_apart = None, None
    if state and state.get("limit") and state.get("usage") is not None:
        # Page cache the kernel drops before it kills (logs written, files read) is room, not the parent's memory.
        limit = int(state["limit"])
        held_apart = int(state["usage"]) - (cgroup.reclaimable_cache(cgroup.memory_dir()) or 0) - sum(uss)
    uncounted = None
    held_now = _held()
    if uss and held_before is not None and held_now is not None:
        # What the cgroup charged for these workers beyond their private memory (page tables, kernel stacks, socket
        # buffers, /dev/shm in flight): measured, it is the reserve each further worker needs, not a flat share.
        uncounted = max(0, held_now - held_before - sum(uss)) // len(uss)
        out["uncounted_per_worker_bytes"] = uncounted
    if uss:  # the workers' own memory is already out of what is available: the budget adds it back
        budget = memory_for_workers(limit, held_apart, available, sum(uss))
        out["workers_that_fit_memory"] = workers_that_fit(budget, max(max(uss), projected_worker or 0), uncounted)
    return out


def _held() -> int | None:
    """The limiting cgroup's usage less the page cache the kernel would drop first; None without a limit."""
    where = cgroup.memory_dir()
    state = cgroup.memory_state(where) or {}
    if not state.get("limit") or state.get("usage") is None:
        return None
    return int(state["usage"]) - (cgroup.reclaimable_cache(where) or 0)


class _Watchdog:
    """Ends the process if a trial without workers hangs in the main thread; the next attempt goes on."""

    def __init__(self, spec: dict[str, Any], after_s: float) -> None:
        self.spec = spec
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(after_s,), name="dlprobe-tune-watchdog", daemon=True)
        self.thread.start()

    def _run(self, after_s: float) -> None:
        if not self.done.wait(after_s):
            _emit(EV_TRIAL_END, **self.spec, status="hung", error=f"no batch for {after_s:.0f} s in the main process")
            os._exit(EXIT_TRIAL_HUNG)

    def cancel(self) -> None:
        self.done.set()
        self.thread.join()


def _shutdown(trial_loader: Any) -> None:
    """Stop the trial's persistent workers now, so the next trial's memory readings start clean."""
    it = getattr(trial_loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        try:
            it._shutdown_workers()
        except Exception as exc:  # the next trial's memory readings may include these workers: say so
            probe_errors.record(
                "tune_trials.shutdown",
                exc,
                "a trial's workers were not shut down, so the next trial's memory readings may include them",
            )
    trial_loader._iterator = None
    gc.collect()


def _throughput(start: float, stamps: list[float], counts: list[int], nw: int, pf: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"batches": len(stamps), "samples": sum(counts)}
    if not stamps:
        return out | {"first_batch_s": None, "samples_per_s": None}
    out["first_batch_s"] = round(stamps[0] - start, 4)
    warm = _warm(len(stamps), nw, pf)
    if len(stamps) - warm < 2:
        warm = 0
    span = stamps[-1] - stamps[warm] if len(stamps) > warm + 1 else 0.0
    samples = sum(counts[warm + 1 :])
    out["samples_per_s"] = round(samples / span, 2) if span > 0 and samples else None
    out["measured_batches"] = max(0, len(stamps) - warm - 1)
    return out


def run_trials(loader: Any) -> int:
    """The takeover entry point: runs the plan in $DLPROBE_TUNE_CONFIG and returns the exit code."""
    os.environ.pop(TAKEOVER_ENV, None)  # trial loaders must not be taken over again
    config = json.loads(os.environ.get(TUNE_CONFIG_ENV, "{}"))
    info = describe(loader)
    accelerator = _accelerator()
    # The script's own loop, timed before the take-over (takeover.loop_timed), or by an earlier attempt of this tune.
    loop = config.get("loop") or takeover.loop_timed() or {}
    _emit(EV_TUNE_LOADER, accelerator=accelerator, loop=loop, **info)
    # Trials try more workers than cores on purpose; PyTorch's warning about it would only be noise here.
    warnings.filterwarnings("ignore", message="This DataLoader will create")
    if info["batches_per_epoch"] == 0:
        print("dlprobe tune: the loader yields no batches, nothing to measure", file=sys.stderr)
        return EXIT_NO_BATCHES
    deadline = float(config.get("deadline", time.time() + 120))
    batches = int(config.get("batches", 40))
    done: dict[str, dict[str, Any]] = {r["key"]: r for r in config.get("done", [])}
    cores, cap = int(config.get("cores", 1)), int(config.get("cap", WORKER_CAP))
    tolerance = float(config.get("tolerance", 0.05))
    # The worker counts: where the model of the curve, re-fitted after every trial, says to measure next.
    memory_bound = False
    while True:
        trials = list(done.values())
        step = next_step(trials, cores, cap, tolerance, loop_seconds(loop, info.get("batch_size"), trials))
        memory_bound = step.limit_reason == "memory"
        spec = None if step.num_workers is None else trial(step.num_workers, 2, False, "workers")
        if spec is not None and step.repeat and spec["key"] in done:
            _measure_again(loader, spec["key"], done, batches, deadline, SEARCH_TRIALS_LEFT)
            continue
        if spec is None or spec["key"] in done:  # a count tried in an earlier attempt and lost with its process
            why = step.reason if spec is None else f"stopped: num_workers={step.num_workers} was tried and did not " \
                f"complete ({done[spec['key']].get('status')})"  # fmt: skip
            tried = [r["num_workers"] for r in done.values() if r.get("stage") == "workers"]
            _emit(EV_TUNE_WORKERS_STOP, reason=why, top=max(tried, default=0))
            break
        spec["predicted_samples_per_s"] = None if step.predicted is None else round(step.predicted, 1)
        spec["search_reason"] = step.reason
        if not _run_one(loader, spec, done, batches, deadline, SEARCH_TRIALS_LEFT):
            _emit(EV_TUNE_WORKERS_STOP, reason="stopped: the budget is spent", top=step.num_workers)
            break
    ok = [r for r in done.values() if completed(r) and r["stage"] == "workers"]
    if ok:
        best = max(ok, key=lambda r: r["samples_per_s"])
        loop_s = loop_seconds(loop, info.get("batch_size"), list(done.values()))
        ahead = [r for r in ok if r["num_workers"] and keeps_up(r["samples_per_s"], loop_s, tolerance)]
        if ahead:  # the loop bounds the job: the prefetch and pinning trials are of the count that keeps up with it
            best = min(ahead, key=lambda r: r["num_workers"])
        later = [t for t in later_stages(best, accelerator, memory_bound) if t["key"] not in done]
        for left, spec in zip(range(len(later), 0, -1), later, strict=True):
            _run_one(loader, spec, done, batches, deadline, left)
        _confirm(loader, done, cap, tolerance, loop_s, batches, deadline)
    return 0


def _confirm(
    loader: Any,
    done: dict[str, dict[str, Any]],
    cap: int,
    tolerance: float,
    loop_s: float | None,
    batches: int,
    deadline: float,
) -> None:
    """The best, read once, and the pick where it was read once, measured once more in turn where a smaller pick is
    within tolerance of the best (tune/search.py to_confirm), if the budget holds them at their first readings'
    length."""
    again = to_confirm(list(done.values()), cap, tolerance, loop_s)
    # Each as long as its first reading took (32 workers take seconds to start), or not at all.
    if not again or deadline - time.time() < sum(max(MIN_TRIAL_S, float(t.get("trial_s") or 0)) for t in again):
        return
    keys = [t["key"] for t in again]
    _emit(EV_TUNE_CONFIRM, keys=keys, rates=[t["samples_per_s"] for t in again], tolerance=tolerance)
    for left, key in zip(range(len(keys), 0, -1), keys, strict=True):
        _measure_again(loader, key, done, batches, deadline, left)


def _measure_again(
    loader: Any, key: str, done: dict[str, dict[str, Any]], batches: int, deadline: float, left: int
) -> None:
    """Measure a trial in `done` once more and keep its faster completed reading (tune/plan.py merge_repeat)."""
    first = done.pop(key)
    spec = {k: first.get(k) for k in ("key", "num_workers", "prefetch_factor", "pin_memory", "stage",
                                      "predicted_samples_per_s", "search_reason")}  # fmt: skip
    _run_one(loader, spec, done, batches, deadline, left)
    done[key] = merge_repeat(first, done.get(key) or spec | {"status": "skipped"})


def _start_up_s(done: dict[str, dict[str, Any]], num_workers: int) -> float:
    """How long a trial's workers took to deliver their first batch, the slowest of the trials with workers so far:
    a trial that has less of the budget left than that and MIN_TRIAL_S would end before it measured anything (under
    forkserver or spawn each worker imports `__main__` again first)."""
    if not num_workers:
        return 0.0
    return max((float(r.get("first_batch_s") or 0.0) for r in done.values() if r.get("num_workers")), default=0.0)


def _run_one(
    loader: Any, spec: dict[str, Any], done: dict[str, dict[str, Any]], batches: int, deadline: float, left: int
) -> bool:
    """Measure one trial into `done` (skipped past an OOM-killed count or with the budget spent: False then)."""
    killed = [r["num_workers"] for r in done.values() if oom_killed(r)]
    if killed and spec["num_workers"] >= min(killed):
        reason = f"num_workers={min(killed)} was killed by the kernel's OOM killer"
        _emit(EV_TRIAL_SKIPPED, **spec, reason=reason)
        done[spec["key"]] = spec | {"status": "skipped"}
        return True
    remaining = deadline - time.time()
    if remaining < MIN_TRIAL_S + _start_up_s(done, spec["num_workers"]):
        _emit(EV_TRIAL_SKIPPED, **spec, reason="budget spent")
        done[spec["key"]] = spec | {"status": "skipped"}
        return False
    where = cgroup.memory_dir()
    state = cgroup.memory_state(where) or {}
    # What the job holds as the trial starts, less the page cache the kernel would drop: the parent the workers join.
    held = {"cgroup_usage_bytes": state.get("usage"), "cgroup_limit_dir": state.get("limit_dir"),
            "cgroup_reclaimable_bytes": cgroup.reclaimable_cache(where) if state.get("limit") else None}  # fmt: skip
    _emit(EV_TRIAL_START, **spec, **held)
    started = time.time()
    result = measure(loader, spec, batches, max(MIN_TRIAL_S, remaining / left), deadline)
    record = spec | result | {"trial_s": round(time.time() - started, 3)}
    done[spec["key"]] = record
    _emit(EV_TRIAL_END, **record)
    return True
