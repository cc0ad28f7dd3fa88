"""Advice on the loader's shape: starved for data, more workers than cores or memory allow, pin_memory."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.measures.head_of_line import HOL_SHARE, HeadOfLine, head_of_line
from dlprobe.analysis.measures.loop_timing import LoopTiming, loop_timing, recorded_usable_cores
from dlprobe.analysis.measures.memory_fit import workers_fit_memory
from dlprobe.analysis.measures.worker_cpu import (
    BUSY_RUNQ_SHARE,
    CPU_BOUND,
    HAND_OVER,
    IDLE_FETCH_SHARE,
    INPUT_BOUND_SHARE,
    IO_BOUND,
    MIXED,
    LoaderCpu,
    idle_worker_ids,
    loader_cpu,
    main_cpu_share,
    main_time,
)
from dlprobe.analysis.measures.worker_reserve import RESERVE_KEYS
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.loader_model.limits import WORKER_CAP
from dlprobe.loader_model.plan import LoaderPace, WorkerPlan
from dlprobe.loader_model.plan import plan_workers as model_plan
from dlprobe.loader_model.rate import (
    cores_left,
    rate_bounds,
    workers_to_feed,
)
from dlprobe.units import format_bytes

INPUT_BOUND_MIN_SPAN_S = 1.0  # seconds of steady time before the loop's pace is advice (a 0.28 s run advised 6 workers)
BURSTY_P95 = 4.0  # p95 wait this many times the median: deeper prefetching smooths it
HEAD_OF_LINE = "head-of-line-bound"
QUEUED_SHARE = 0.3  # workers queued for a core this share of their time: the cores are full, say so
MEMORY_KEYS = ("memory_for_workers_bytes", "projected_worker_bytes", *RESERVE_KEYS)  # input-bound's, of the memory fit


def suggest_workers(current: int, per_batch_load_s: float, step_s: float, cores: int) -> int:
    """Workers needed so that batches are ready as fast as the loop consumes them, within the usable cores."""
    # A loop with no work of its own always waits: only the cores bound it.
    needed = cores if step_s <= 1e-4 else workers_to_feed(per_batch_load_s, step_s)
    return max(current + 1, min(needed, cores)) if current < cores else current


def plan_workers(
    nw: int, timing: LoopTiming, cpu: LoaderCpu, cores: int, fit_memory: int | None, main_share: float | None = None
) -> WorkerPlan:
    """The model's worker plan (loader_model/plan.py) for this window's loop timing and workers' CPU."""
    pace = LoaderPace(timing.mean_wait_s, timing.step_s, timing.handover_s, cpu.cpu_share, cpu.runq_share,
                      cpu.busy_share)  # fmt: skip
    return model_plan(nw, pace, cores, fit_memory, main_share)


def _rate_text(loader: LoaderRecord, batches_per_s: float) -> str:
    batch = loader.config.get("batch_size")
    if isinstance(batch, int) and batch > 0:
        return f"{batches_per_s * batch:,.0f} samples/s"
    return f"{batches_per_s:,.1f} batches/s"


_LIMIT_WORDS = {
    "memory": "the memory left for workers",
    "cores": "the usable cores",
    "main": "the main process's one thread receiving batches",
    "handover": "the main process taking each batch off the workers' result queue, one at a time",
    "loop": "the loop's own step",
    "cap": f"dlprobe's cap of {WORKER_CAP} workers",
}


def _measured_advice(
    loader: LoaderRecord,
    nw: int,
    timing: LoopTiming,
    cpu: LoaderCpu,
    cores: int,
    fit_memory: int | None,
    main_share: float | None = None,
) -> tuple[int, str, Evidence]:
    """(suggested workers, fix text, evidence) from the workers' measured CPU and waiting shares and the main
    process's CPU."""
    if cpu.bound == HAND_OVER:
        handover = None if timing.handover_s is None else round(1000 * timing.handover_s, 3)
        over: Evidence = {**cpu.evidence(), "handover_ms_per_batch": handover, "workers_that_fit_memory": fit_memory}
        return nw, _hand_over_fix(loader, nw, timing, cpu), over
    plan = plan_workers(nw, timing, cpu, cores, fit_memory, main_share)
    evidence: Evidence = {
        **cpu.evidence(),
        "main_cpu_share": None if main_share is None else round(main_share, 3),
        "handover_ms_per_batch": None if timing.handover_s is None else round(1000 * timing.handover_s, 3),
        "cores_left": round(plan.cores_left, 2),
        "model_limits": plan.limits,
        "model_limit": plan.limit,
        "batches_per_s": round(plan.batches_per_s_now, 2),
        "predicted_batches_per_s": round(plan.batches_per_s, 2),
        "workers_that_fit_memory": fit_memory,
    }
    demand = nw * cpu.busy_share
    main = f", the main process {100 * main_share:.0f}%" if main_share is not None else ""
    if plan.workers > nw:
        why = {
            IO_BOUND: f"the workers are asleep {100 * cpu.wait_share:.0f}% of their time, so more of them overlap "
            "their waits and throughput grows about in proportion",
            MIXED: f"the workers are on a CPU only {100 * cpu.cpu_share:.0f}% of their time ({nw * cpu.cpu_share:.1f} "
            f"of {cores} usable core(s) in all{main}"
            + (
                f"; queued for a core {100 * (cpu.runq_share or 0):.0f}%, behind other work"
                if (cpu.runq_share or 0) >= QUEUED_SHARE
                else ""
            )
            + "), so more of them fit on the cores",
            CPU_BOUND: f"{nw} worker(s) use {demand:.1f} of {cores} usable core(s)",
        }[cpu.bound]
        fix = (
            f"{why[:1].upper()}{why[1:]}. Predicted {_rate_text(loader, plan.batches_per_s)} against "
            f"{_rate_text(loader, plan.batches_per_s_now)} now. The number is set by {_LIMIT_WORDS[plan.limit]}"
            + (
                f" (each worker is on a CPU {100 * cpu.cpu_share:.0f}% of its time{main}, so {plan.workers} fill "
                f"the {plan.cores_left:.1f} core(s) other work leaves)"
                if plan.limit == "cores"
                else ""
            )
            + (f"; {fit_memory} fit the memory left for workers" if fit_memory is not None else "")
            + ". Measure it with `dlprobe tune`."
        )
        return plan.workers, fix, evidence
    if plan.limit == "cores" and cpu.bound == CPU_BOUND:
        fix = (
            f"num_workers={nw} already keeps the usable cores busy: the workers are on a CPU or queued for one "
            f"{100 * cpu.busy_share:.0f}% of their time ({demand:.1f} of {cores} core(s){main}"
            + (
                f"; queued for a core {100 * (cpu.runq_share or 0):.0f}%: other work shares these cores"
                if (cpu.runq_share or 0) >= QUEUED_SHARE
                else ""
            )
            + "), so more workers will not help: make each sample cheaper (see worker-hotspots: decode, "
            "transforms), cache decoded data, or run on more cores."
        )
    elif plan.limit in ("cores", "main") and main_share is not None and plan.main_cpu_s is not None:
        # The workers are not the ones on the CPU: the main process is, receiving batches and running the step.
        fix = (
            f"num_workers={nw} already reaches what the main process can take: it is on a CPU "
            f"{100 * main_share:.0f}% of the time ({1000 * plan.main_cpu_s:.1f} ms per batch, receiving each batch "
            f"on one thread and running the loop's step) while the workers are on one {100 * cpu.cpu_share:.0f}%"
            + (f", and together they fill the {plan.cores_left:.1f} core(s) left" if plan.limit == "cores" else "")
            + ": more workers would only compete with it. Make the main process's work per batch cheaper: fewer, "
            "larger tensors per batch (one stacked array instead of many small ones) are cheaper to receive; "
            "move work from the loop into the workers."
        )
    elif plan.limit == "memory":
        fix = (
            f"More workers would overlap more waiting ({cpu.describe()}), but only {fit_memory} fit the memory left "
            "for workers: shrink each worker's memory (see cow-growth), then add workers."
        )
    else:
        fix = f"num_workers={nw} is at {_LIMIT_WORDS[plan.limit]}: make each sample cheaper to load."
    return nw, fix, evidence


def _hand_over_fix(loader: LoaderRecord, nw: int, timing: LoopTiming, cpu: LoaderCpu) -> str:
    """The loop starves while its workers sit idle between batches: the wait is in handing batches over."""
    prefetch = loader.config.get("prefetch_factor")
    deeper = f"more batches in flight (prefetch_factor, now {prefetch}) are ready before the loop asks for them"
    queued = cpu.runq_share or 0
    return (
        f"More workers will not help: the {nw} worker(s) spent only {100 * (cpu.fetch_share or 0):.0f}% of their time "
        f"building batches and waited for their next index the rest, so loading is not what the loop waits "
        f"{1000 * timing.mean_wait_s:.1f} ms for. The wait is in handing each batch to the loop: the main process "
        "receiving and rebuilding it (one shared-memory file per tensor"
        + (f"; {1000 * timing.handover_s:.1f} ms a batch, timed" if timing.handover_s is not None else "")
        + "), or the processes waiting for a core"
        + (f" (the workers were queued for one {100 * queued:.0f}% of their time)" if queued >= 0.05 else "")
        + f". What can help: {deeper}; fewer, larger tensors per batch (one stacked array instead of many small ones) "
        "are cheaper to hand over; cores left free for the training processes."
    )


def _head_of_line_fix(hol: HeadOfLine) -> str:
    """The loop waits on one batch in order while later ones are built: say whose, how slow, and the two ways out."""
    holders = hol.holders()
    worker, held = holders[0]
    evidence: Evidence = hol.evidence()
    slow = [b["first_index"] for b in hol.slowest]
    return (
        f"More workers will not help: the loop takes batches in the sampler's order, and for "
        f"{100 * hol.share:.0f}% of its wait a later batch was already built while it waited for an earlier one "
        f"(worker {worker}'s batches held the queue {100 * held:.0f}% of that time). The slowest batches took "
        f"{1000 * evidence['batch_build_max_s']:.0f} ms to build against a median of "
        f"{1000 * evidence['batch_build_median_s']:.1f} ms (first indices {', '.join(map(str, slow))}), and every "
        "worker stops once its prefetched batches wait behind them. in_order=False (torch >= 2.6) hands batches "
        "over as they are ready (the order of batches within an epoch then varies between runs); or spread the "
        "expensive samples over the batches (a sampler that interleaves them) or make them cheaper (cache or "
        "pre-shrink the large items)."
    )


def _machine_busy_in_loop(run: RunData, loader: LoaderRecord, cpu: LoaderCpu | None) -> dict[str, Any] | None:
    """Whether the loop's wait is the machine's load: the loop's process or its workers waited for a core (run-queue
    wait, schedstat) at least BUSY_RUNQ_SHARE of the steady time while the job itself used fewer cores than it may
    (the queue was other programs', not the loader's own processes crowding its cores). None: not busy, or not read."""
    main = main_time(run, loader)
    worker_runq = cpu.runq_share if cpu is not None else None
    if main is None or cpu is None or worker_runq is None:
        return None
    wall, main_cpu, main_runq = main
    if main_runq is None:
        return None
    runq_share = max(main_runq / wall, worker_runq)
    used_cores = main_cpu / wall + cpu.cpu_share * len(cpu.workers)
    if runq_share < BUSY_RUNQ_SHARE or used_cores >= recorded_usable_cores(run):
        return None
    return {"runq_share": round(runq_share, 3), "used_cores": round(used_cores, 2)}


def find_input_bound(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    if run.ended_in_error:  # a dying job's last batches say nothing about how fast it loads
        return findings
    cores = recorded_usable_cores(run)
    for loader in run.loaders:
        timing = loop_timing(loader)
        if timing is None or timing.span_s < INPUT_BOUND_MIN_SPAN_S or timing.wait_share < INPUT_BOUND_SHARE:
            continue
        if not loader.settings_read:
            findings.append(_input_bound_settings_unknown(run, loader, timing))
            continue
        nw = loader.num_workers
        # With n workers each one needs n x (wait + step) per batch while the loop is starved; with none the
        # whole load happens inside next(), so the wait is the load time.
        load_s = timing.mean_wait_s if nw == 0 else nw * (timing.mean_wait_s + timing.step_s)
        cpu = loader_cpu(run, loader, idle_worker_ids(loader))
        evidence: Evidence = {}
        hol = head_of_line(run, loader) if nw >= 2 else None
        # A later batch built while the loop waits is also what the loop sees while the main process takes the
        # current one in: where that hand-over is half the wait or more (the half that says idle workers are waiting
        # for the hand-over, seen from the other side), the order is not what holds the loop.
        handing_over = (
            timing.handover_s is not None
            and timing.handover_s >= IDLE_FETCH_SHARE * timing.mean_wait_s
            and cpu is not None
            and cpu.bound != CPU_BOUND  # their hand-over waits on their own computing: not the main process's
        )
        blocked = hol is not None and hol.share >= HOL_SHARE and not handing_over
        if hol is not None and blocked:
            # More workers would only wait behind the same slow batch: the order is the bound, not their number.
            suggested, worker_fix = nw, _head_of_line_fix(hol)
            evidence = cpu.evidence() if cpu is not None else {}
            evidence.update(hol.evidence())
            evidence["bound"] = HEAD_OF_LINE
        elif nw > 0 and cpu is not None:
            fit_memory, memory = workers_fit_memory(run, loader)
            main_share = main_cpu_share(run, loader)
            suggested, worker_fix, evidence = _measured_advice(loader, nw, timing, cpu, cores, fit_memory, main_share)
            # what the memory limit in the advice is made of, the reserve kept per worker included
            evidence.update(as_evidence({k: v for k, v in memory.items() if k in MEMORY_KEYS}))
        else:
            # Without workers any number up to the cores helps whatever the loading does; past the cores, only
            # the workers' measured CPU time could tell, and it is missing.
            suggested = suggest_workers(nw, load_s, timing.step_s, cores)
            worker_fix = ""
            if nw > 0:
                evidence["bound"] = None  # not measured: no CPU time was read for the workers
        changes = []
        if suggested > nw:
            changes.append(f"num_workers={suggested}")
        epochs_restarted = len(loader.epochs) > 1 and not loader.config.get("persistent_workers")
        if suggested > 0 and (epochs_restarted or nw == 0):
            changes.append("persistent_workers=True")
        bursty = timing.median_wait_s > 0 and timing.p95_wait_s > BURSTY_P95 * timing.median_wait_s
        idle_workers = cpu is not None and cpu.bound == HAND_OVER
        prefetch = loader.config.get("prefetch_factor")
        if suggested > 0 and (bursty or (idle_workers and isinstance(prefetch, int) and prefetch < 4)):
            changes.append("prefetch_factor=4")
        bound = f" ({cpu.bound}: workers {cpu.describe()})" if nw > 0 and cpu is not None else ""
        if hol is not None and blocked:
            worker, held = hol.holders()[0]
            bound = (
                f" ({HEAD_OF_LINE}: for {100 * hol.share:.0f}% of its wait a later batch was already built; worker "
                f"{worker}'s batches held the queue {100 * held:.0f}% of that time)"
            )
        # A loop that waits because other programs hold the cores is the machine's load, not the loader's: a note
        # that says so, not a warning (a CI rule failing on warnings must not fail a healthy loader on a busy runner).
        busy = _machine_busy_in_loop(run, loader, cpu)
        title = (
            f"Loader {loader.loader_id} is input-bound{bound}: the loop waited for data {100 * timing.wait_share:.0f}%"
            f" of the time ({1000 * timing.mean_wait_s:.1f} ms per batch, {1000 * timing.step_s:.1f} ms of its own "
            "work)"
        )
        if busy:
            title += (
                f"; the machine was busy: other programs held the cores (its processes waited for one "
                f"{100 * busy['runq_share']:.0f}% of the time, using {busy['used_cores']:.1f} of {cores})"
            )
        detail = (
            f"With num_workers={nw}, loading one batch takes about {1000 * load_s:.1f} ms of one worker's time while "
            f"the loop needs a batch every {1000 * timing.step_s:.1f} ms. {cores} usable core(s) "
            f"(affinity {run.meta.get('machine', {}).get('cpu_affinity')}, cgroup quota "
            f"{run.meta.get('machine', {}).get('cpu_quota') or 'none'})."
        )
        if idle_workers and cpu is not None and cpu.fetch_share is not None:
            detail = (
                f"With num_workers={nw}, each worker built a batch in about {1000 * cpu.fetch_share * load_s:.1f} ms "
                f"(timed in the workers) and then waited for its next index, while the loop needs a batch every "
                f"{1000 * timing.step_s:.1f} ms and still waited {1000 * timing.mean_wait_s:.1f} ms for each. "
                f"{cores} usable core(s)."
            )
        if nw > 0 and cpu is None:
            detail += (
                " The workers' CPU time was not measured, so whether they compute or wait (CPU- or I/O-bound) is "
                "not known."
            )
        if blocked:
            fix = f"DataLoader(..., {', '.join(['in_order=False', *changes])}). {worker_fix}"
        elif worker_fix and (suggested > nw or (idle_workers and changes)):
            fix = f"DataLoader(..., {', '.join(changes)}). {worker_fix}"
        elif worker_fix:
            fix = worker_fix + (f" Also set {', '.join(changes)}." if changes else "")
        elif suggested > nw:
            fix = (
                f"DataLoader(..., {', '.join(changes)}): about {suggested} worker(s) produce batches as fast as the "
                "loop uses them"
                + (f" ({cores} usable core(s) cap it)" if suggested == cores else "")
                + ". Measure the choice on this machine with `dlprobe tune`."
            )
        else:
            fix = (
                f"num_workers={nw} uses as many workers as usable cores, and whether they are on the CPU or waiting "
                "(I/O) was not measured, so no worker count is advised: `dlprobe tune` measures each choice."
                + (f" Also set {', '.join(changes)}." if changes else "")
            )
        if busy:
            detail += (
                " Other programs kept the cores busy while the loop ran: this is a note, not a warning; measure "
                "again on a quiet machine (or with `dlprobe tune`) before changing the loader."
            )
        evidence.update(
            {
                "busy": busy,
                "wait_share": round(timing.wait_share, 3),
                "steady_batches": timing.batches,
                "mean_wait_s": round(timing.mean_wait_s, 5),
                "median_wait_s": round(timing.median_wait_s, 5),
                "p95_wait_s": round(timing.p95_wait_s, 5),
                "step_s": round(timing.step_s, 5),
                "load_per_batch_s": round(load_s, 5),
                "num_workers": nw,
                "usable_cores": cores,
                "suggested_num_workers": suggested,
                "suggested_changes": changes,
            }
        )
        findings.append(
            Finding(
                code="input-bound",
                severity="info" if busy else "warning",
                title=title,
                detail=detail,
                fix=fix,
                evidence=evidence,
                loader_id=loader.loader_id,
            )
        )
    return findings


def _input_bound_settings_unknown(run: RunData, loader: LoaderRecord, timing: LoopTiming) -> Finding:
    """The loop starved, but the loader's settings could not be read: the wait is measured, the remedy is not known
    (advising num_workers=N from a num_workers that was never read would be advice from a gap)."""
    seen = loader.num_workers
    return Finding(
        code="input-bound",
        severity="warning",
        title=(
            f"Loader {loader.loader_id} is input-bound: the loop waited for data {100 * timing.wait_share:.0f}% of "
            f"the time ({1000 * timing.mean_wait_s:.1f} ms per batch); its settings could not be read"
        ),
        detail=(
            f"The loop waited {1000 * timing.mean_wait_s:.1f} ms per batch for {1000 * timing.step_s:.1f} ms of its "
            f"own work. dlprobe could not read this loader's settings (num_workers, persistent_workers, "
            f"prefetch_factor; see the probe-degraded finding), so it cannot say how many workers would keep up; "
            f"{seen} worker process(es) were seen starting."
        ),
        fix="Measure the worker count on this machine with `dlprobe tune`, or check the DataLoader's num_workers, "
        "persistent_workers and prefetch_factor in the script against the usable cores.",
        evidence={
            "wait_share": round(timing.wait_share, 3),
            "steady_batches": timing.batches,
            "mean_wait_s": round(timing.mean_wait_s, 5),
            "step_s": round(timing.step_s, 5),
            "num_workers": None,
            "workers_seen": seen,
            "usable_cores": recorded_usable_cores(run),
            "missing": ["num_workers", "persistent_workers", "prefetch_factor"],
        },
        loader_id=loader.loader_id,
    )


def find_too_many_workers(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    if run.ended_in_error:  # as input-bound: no worker count advised from a failing run
        return findings
    cores = recorded_usable_cores(run)
    for loader in run.loaders:
        nw = loader.num_workers
        if nw == 0 or not loader.settings_read:  # "fewer workers" needs the number that was set
            continue
        fit_memory, memory_evidence = workers_fit_memory(run, loader)
        evidence: Evidence = {"num_workers": nw, "usable_cores": cores, **memory_evidence}
        # More workers than cores are too many only if they want the CPU: asleep on reads, more of them overlap
        # their waits. Without their CPU time there is no telling, so the cores alone prove nothing.
        cpu = loader_cpu(run, loader, idle_worker_ids(loader)) if nw > cores else None
        fit_cores = _workers_fit_cores(cpu, cores) if cpu is not None else None
        if cpu is not None:
            evidence.update(cpu.evidence())
            evidence["workers_that_fit_cores"] = fit_cores
        over_cores = fit_cores is not None and fit_cores < nw
        over_memory = fit_memory is not None and fit_memory < nw
        if not over_cores and not over_memory:
            continue
        limits = ([fit_cores] if over_cores and fit_cores else []) + ([fit_memory] if fit_memory is not None else [])
        fit = max(0 if over_memory and fit_memory == 0 else 1, min(limits))
        reasons = []
        if over_cores and cpu is not None:
            reasons.append(
                f"{nw} workers compete for {cores} usable core(s): each is on a CPU or queued for one "
                f"{100 * cpu.busy_share:.0f}% of its time"
            )
        if over_memory:
            reasons.append(
                f"each worker is projected to reach {format_bytes(evidence['projected_worker_bytes'])} private memory "
                f"over an epoch and only {format_bytes(evidence['memory_for_workers_bytes'])} is left for workers"
            )
        evidence["workers_that_fit"] = fit
        timing = loop_timing(loader)
        consumer = ""
        if timing is not None and timing.span_s >= INPUT_BOUND_MIN_SPAN_S:
            evidence["loop_wait_share"] = round(timing.wait_share, 3)
            if timing.wait_share < INPUT_BOUND_SHARE:
                # Not starved: fewer workers lose nothing while the loop's own step sets the pace (and workers
                # asleep here wait for indices, not for reads: they are not I/O-bound).
                evidence["bound"] = "consumer-bound"
                consumer = (
                    f" The loop itself is the bottleneck (consumer-bound: it waited for data only "
                    f"{100 * timing.wait_share:.0f}% of the time), so fewer workers keep up."
                )
        findings.append(
            Finding(
                code="too-many-workers",
                severity="error" if over_memory else "warning",
                title=f"Loader {loader.loader_id} has num_workers={nw} but only {fit} fit: " + "; ".join(reasons),
                detail=(
                    "Workers that want the CPU beyond the usable cores (affinity mask and cgroup CPU quota) only add "
                    "context switches, memory and in-flight batches in /dev/shm; PyTorch's own check looks at the "
                    "affinity mask only. Workers beyond the memory left for them end in 'DataLoader worker (pid N) "
                    "is killed by signal: Killed.'" + consumer
                ),
                fix=f"DataLoader(..., num_workers={fit})"
                + (" and shrink per-worker memory (see cow-growth)" if over_memory else "")
                + "; `dlprobe tune` measures the throughput of each choice.",
                evidence=evidence,
                loader_id=loader.loader_id,
            )
        )
    return findings


def _workers_fit_cores(cpu: LoaderCpu, cores: int) -> int | None:
    """The workers the cores hold, by the model `run`'s advice and `tune` share: the cores other work leaves over
    each worker's CPU (queued for a core is other work's load unless the workers want a core all the time); None
    without a CPU tick."""
    per_worker = rate_bounds(1, 1.0, cpu.cpu_share, None, cores_left(cores, cpu.cpu_share, cpu.runq_share,
                                                                     cpu.busy_share))  # fmt: skip
    return max(1, int(per_worker["cores"])) if "cores" in per_worker else None
