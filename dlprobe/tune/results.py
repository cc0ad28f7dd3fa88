"""Turns tune attempts (run directories) into trial rows with memory, and picks the recommended configuration."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.measures.batch_sent import in_flight_bytes
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.measures.worker_growth import load_done_at, worker_end
from dlprobe.analysis.run.model import RunData
from dlprobe.loader_model.limits import HEADROOM, MEMORY_SHARE
from dlprobe.loader_model.memory_growth import epoch_share, linear_clock
from dlprobe.loader_model.reserve import worker_reserve as shared_reserve
from dlprobe.loader_model.worker_memory import fits, memory_for_workers, steady_growth
from dlprobe.rundir.schema import EV_TRIAL_SKIPPED, EV_TRIAL_START, EV_WORKER_BATCHES
from dlprobe.tune.loop import keeps_up
from dlprobe.tune.plan import DUPLICATE_SHARE, completed, merge_repeat, oom_killed, preference
from dlprobe.tune.records import TuneMemory


def memory_available(run: RunData, supervisor: dict[str, Any] | None = None) -> TuneMemory:
    """What the user's workers may use: the cgroup limit less what the job held when the first trial began (the
    parent: the script up to its loader), or MemAvailable then, whichever is tighter.

    Read at the first trial, not at the first reading: the script imports torch and builds its dataset in between,
    and that memory is the parent's, not the workers' to use. Not the parent's: the page cache the kernel drops
    before it kills (dlprobe's run directory, files read), and dlprobe's supervisor (`supervisor`: its private bytes
    and its memory cgroup's limit directory), which shares the cgroup only while tune runs."""
    system = run.system
    start = next((e for e in run.events if e.get("ev") == EV_TRIAL_START), None)
    first = float(start["t"]) if start is not None else None

    def at_start(values: list[int | None]) -> int | None:
        read = [(t, v) for t, v in zip(system.t, values, strict=False) if v is not None]
        before = [v for t, v in read if first is not None and t <= first]
        return before[-1] if before else (read[0][1] if read else None)

    available = at_start(system.available)
    out: TuneMemory = {"mem_available_bytes": available, "cgroup_limit_bytes": system.cgroup_limit}
    budget = available
    # Read by the script as the trial began where it could be: the supervisor's last sample may be a quarter second
    # old, and the script is still finishing its imports then.
    read = (start or {}).get("cgroup_usage_bytes")
    usage = read if isinstance(read, int) and read > 0 else at_start(system.cgroup_usage)
    if system.cgroup_limit and usage is not None:
        cache = (start or {}).get("cgroup_reclaimable_bytes")
        cache = cache if isinstance(cache, int) and 0 < cache < usage else 0
        own = (supervisor or {}).get("private_bytes")
        same = own and (supervisor or {}).get("limit_dir") == (start or {}).get("cgroup_limit_dir")
        grown = _main_growth(run, first)
        parent = usage - cache - (int(own) if same and own else 0) + grown
        budget = memory_for_workers(system.cgroup_limit, parent, available)
        out.update({"parent_bytes": parent, "held_bytes": usage, "page_cache_bytes": cache or None,
                    "supervisor_bytes": int(own) if same and own else None, "parent_growth_bytes": grown})  # fmt: skip
    out["budget_bytes"] = budget
    out["source"] = "cgroup limit" if system.cgroup_limit and budget != available else "MemAvailable"
    return out


def _main_growth(run: RunData, first: float | None) -> int:
    """How much the script's own process grew (resident) from the first trial to its peak during the trials: the
    batches it receives and what it allocates for them are the parent's too, at any worker count."""
    main = next((p for p in run.processes if p.role == "main"), None)
    values = main.series.values("rss") if main is not None and first is not None else []
    before = [v for t, v in values if t <= first] if first is not None else []
    after = [v for t, v in values if first is not None and t > first]
    if not before or not after:
        return 0
    return max(0, max(after) - before[-1])


def _window(run: RunData, start: float, end: float) -> tuple[int | None, int | None]:
    """/dev/shm use at the start of a window and its peak inside it."""
    inside = [u for t, u in zip(run.system.t, run.system.shm_used, strict=False) if start <= t <= end and u is not None]
    before = [u for t, u in zip(run.system.t, run.system.shm_used, strict=False) if t <= start and u is not None]
    base = before[-1] if before else (inside[0] if inside else None)
    return base, max(inside) if inside else None


def _worker_memory(run: RunData, loader_id: int | None, steady_from: float, end: float) -> dict[str, Any]:
    """Per-worker USS peak (its base: what it holds once started, a load at start included) and its growth over the
    steady part of the trial (after its first batch and after a load at start is done).

    Growth right after fork is the worker touching its inherited pages once, and a table loaded in worker_init_fn
    or on the first sample is paid once: only the steady growth says what a longer epoch will add."""
    peaks, growths = [], []
    steady_s = 0.0
    loaded = False
    first = _first_batch_done(run)
    for proc in run.workers(loader_id) if loader_id is not None else []:
        values = proc.series.values("uss")
        if not values:
            continue
        peaks.append(max(v for _, v in values))
        done_at = load_done_at(proc.series)
        loaded = loaded or done_at is not None
        # worker_init_fn and a load in the first sample are over once the worker's own first batch is made: a slow
        # worker still loading while the others deliver has not started its steady part.
        own = first.get(proc.pid, steady_from)
        fitted = steady_growth(values, max(steady_from, own, done_at or 0.0), end + 1.0)
        if fitted is not None:
            growths.append(fitted.bytes)
            steady_s = max(steady_s, fitted.seconds)
    if not peaks:
        return {"worker_uss_peak_bytes": None, "worker_uss_growth_bytes": None, "steady_window_s": None}
    return {
        "worker_uss_peak_bytes": max(peaks),
        "worker_uss_growth_bytes": max(growths) if growths else None,
        "steady_window_s": round(steady_s, 3),
        "loaded_at_start": loaded,
    }


def _first_batch_done(run: RunData) -> dict[int, float]:
    """When each worker (by pid) finished its first batch, from its per-batch rows (start + fetch + collate)."""
    out: dict[int, float] = {}
    for ev in run.events:
        if ev.get("ev") != EV_WORKER_BATCHES or not isinstance(ev.get("pid"), int) or ev["pid"] in out:
            continue
        rows = ev.get("rows") or []
        if rows and isinstance(ev.get("t0"), (int, float)):
            _, start, fetch, collate, *_ = rows[0]
            out[ev["pid"]] = float(ev["t0"]) + start + fetch + collate
    return out


def _trial_projection(
    run: RunData, loader_id: int | None, start: dict[str, Any], end: dict[str, Any], batches_per_epoch: int | None
) -> dict[str, Any]:
    """The trial's largest worker projected to the end of a full epoch, as `run`'s advice projects a worker
    (worker_growth.project_worker: what it held at start, then its copies and new allocations, each bent toward its
    ceiling; loader_model/memory_growth.worker_end_bytes), on the trial's epoch clock: the trial began an epoch at its
    start and had done `batches` of `batches_per_epoch` at its last batch (a trial that went past its epoch, or a
    loader of unknown length, has nothing left to project: its peak)."""
    if loader_id is None:
        return {"projected_worker_bytes": None, "worker_projection": None}
    fraction = epoch_share(int(end.get("batches") or 0), batches_per_epoch, ended=bool(end.get("passes")))
    last_batch = float(end["t"]) - float(end.get("shutdown_s") or 0.0)  # trial_end is written after the shutdown
    share_at = linear_clock(float(start["t"]), last_batch, fraction)
    ends = [e for proc in run.workers(loader_id) if (e := worker_end(run, loader_id, proc, fraction, share_at))]
    if not ends:
        return {"projected_worker_bytes": None, "worker_projection": None}
    end_bytes, _peak, model = max(ends, key=lambda e: e[0])
    return {"projected_worker_bytes": end_bytes, "worker_projection": model.evidence()}


def project_epoch_bytes(trial: dict[str, Any]) -> int | None:
    """The workers' memory at the end of a full epoch, on top of what the job used before the trials (the parent):
    n x a worker's projected memory (`projected_worker_bytes`, _trial_projection; its peak where no projection was
    made) + /dev/shm in flight (n x prefetch_factor x batch bytes where the batch's size was read, else the /dev/shm
    rise measured)."""
    nw = trial["num_workers"]
    shm = max(trial.get("shm_peak_delta_bytes") or 0, trial.get("shm_in_flight_bytes") or 0)
    if nw == 0:
        return shm
    per_worker = trial.get("projected_worker_bytes") or trial.get("worker_uss_peak_bytes")
    if per_worker is None:
        return None
    return int(nw * per_worker + shm)


def collect_trials(
    run: RunData, batches_per_epoch: int | None, timed_out: bool = False
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Trial rows of one attempt, and the trial that was running when its process died (or None)."""
    ends: dict[str, list[dict[str, Any]]] = {}
    for ended in events_of(run, "trial_end"):
        ends.setdefault(ended["key"], []).append(ended)  # a count the search measured twice ends twice
    rows = []
    lost = None
    for ev in run.events:  # in the order the trials ran
        kind = ev.get("ev")
        base = {k: ev.get(k) for k in ("key", "num_workers", "prefetch_factor", "pin_memory", "stage",
                                       "predicted_samples_per_s", "search_reason")}  # fmt: skip
        if kind == EV_TRIAL_SKIPPED:
            rows.append(base | {"status": "skipped", "error": ev.get("reason")})
        if kind != EV_TRIAL_START:
            continue
        end = ends[ev["key"]].pop(0) if ends.get(ev["key"]) else None
        if end is None:
            status = "hung" if timed_out else "crashed"
            reason = run.result.get("signal") or f"exit code {run.result.get('exit_code')}"
            lost = base | {"status": status, "error": f"the process died ({reason})"}
            pids = {p.pid for p in run.processes}  # the whole attempt died with this trial
            lost.update(oom_death(run, pids, ev["t"], float("inf")) or {})
            rows.append(lost)
            continue
        row = _finished_row(run, base, ev, end, batches_per_epoch)
        if row["status"] in ("crashed", "oom"):
            workers = {p.pid for p in run.workers(end.get("loader_id"))} if end.get("loader_id") is not None else set()
            row.update(oom_death(run, workers, ev["t"], end["t"]) or {})
        rows.append(row)
    return best_of_repeats(rows), lost


def best_of_repeats(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per trial key: of a configuration measured more than once, its faster completed reading, with every
    reading's rate and status kept (tune/plan.py merge_repeat)."""
    by_key: dict[str, dict[str, Any]] = {}
    for row in rows:
        kept = by_key.get(row["key"])
        by_key[row["key"]] = row if kept is None else merge_repeat(kept, row)
    return list(by_key.values())


def oom_death(run: RunData, pids: set[int], start: float, end: float) -> dict[str, Any] | None:
    """A trial's death by the kernel's OOM killer, where the kernel log names one of `pids` or the cgroup's OOM-kill
    count rose during the trial: its status, the memory at death and the evidence; None without such evidence
    (unreadable log and counter included: then the trial stays 'crashed')."""
    kills = [k for k in (run.kernel.get("kills") or []) if k.get("pid") in pids]
    system = run.system
    counts = [(t, c) for t, c in zip(system.t, system.cgroup_oom_kills, strict=False) if c is not None]
    before = [c for t, c in counts if t <= start]
    after = [c for t, c in counts if start < t <= end + 1.0]
    counted = max(after) - before[-1] if before and after else 0
    if not kills and counted <= 0:
        return None
    out: dict[str, Any] = {"status": "oom"}
    if kills:
        kill = kills[0]
        out["oom_kill_pid"] = kill["pid"]
        out["oom_kernel_line"] = kill.get("line")
        rss = (kill.get("anon_rss_bytes") or 0) + (kill.get("shmem_rss_bytes") or 0)
        out["killed_rss_bytes"] = rss or None
    if counted > 0:
        out["cgroup_oom_kills"] = counted
    window = zip(system.t, system.cgroup_usage, strict=False)
    usage = [u for t, u in window if start <= t <= end + 1.0 and u is not None]
    out["memory_at_death_bytes"] = max(usage) if usage else None  # the cgroup's peak: what the job held when killed
    killed = f"pid {kills[0]['pid']} ({kills[0].get('comm')})" if kills else "a process of the job"
    at = [f"{_mib(out.get('killed_rss_bytes'))} resident"] if out.get("killed_rss_bytes") else []
    if out["memory_at_death_bytes"] and run.system.cgroup_limit:
        at.append(f"the cgroup at {_mib(out['memory_at_death_bytes'])} of its {_mib(run.system.cgroup_limit)} limit")
    source = "the kernel log" if kills else "the cgroup's OOM-kill count"
    out["error"] = f"killed by the kernel's OOM killer ({source}): {killed}" + (f", {', '.join(at)}" if at else "")
    return out


def _finished_row(
    run: RunData, base: dict[str, Any], start: dict[str, Any], end: dict[str, Any], batches_per_epoch: int | None
) -> dict[str, Any]:
    row = base | {k: end.get(k) for k in ("status", "error", "batches", "samples", "first_batch_s", "samples_per_s",
                                          "measured_batches", "passes", "loader_id", "worker_busy_share",
                                          "worker_cpu_share", "worker_runq_share", "main_cpu_share",
                                          "main_handover_share", "settled", "workers_that_fit_memory",
                                          "uncounted_per_worker_bytes")}  # fmt: skip
    row["duration_s"] = round(end["t"] - start["t"], 3)
    steady_from = start["t"] + (end.get("first_batch_s") or 0.0)
    row.update(_worker_memory(run, end.get("loader_id"), steady_from, end["t"]))
    row.update(_trial_projection(run, end.get("loader_id"), start, end, batches_per_epoch))
    shm_base, shm_peak = _window(run, start["t"], end["t"])
    row["shm_peak_delta_bytes"] = max(0, shm_peak - shm_base) if shm_peak is not None and shm_base is not None else None
    batch_bytes = _batch_bytes(run, loader_id := end.get("loader_id"))
    row["batch_bytes"] = batch_bytes
    row["shm_in_flight_bytes"] = in_flight_bytes(row["num_workers"], row.get("prefetch_factor"), batch_bytes) or None
    dupes = events_of(run, "dupes", loader_id) if loader_id is not None else []
    repeats = dupes[-1].get("duplicates") if dupes else None  # absent where only the ranks' sketch was kept
    if repeats is not None and dupes[-1]["samples"] and repeats >= DUPLICATE_SHARE * dupes[-1]["samples"]:
        row["duplicates"] = dupes[-1]["duplicates"]
        row["status"] = "duplicates" if row["status"] == "ok" else row["status"]
    row["projected_epoch_bytes"] = project_epoch_bytes(row)
    return row


def _batch_bytes(run: RunData, loader_id: int | None) -> int | None:
    loader = run.loader(loader_id) if loader_id is not None else None
    value = ((loader.batch_info if loader is not None else None) or {}).get("bytes")
    return int(value) if isinstance(value, int) and value > 0 else None


def worker_reserve(trials: list[dict[str, Any]]) -> int | None:
    """Bytes to keep free per worker beyond its projection, from what the trials measured (loader_model/reserve.py,
    as `run` does): a worker's private peak across trials (the projection uses its own trial's) and what the cgroup
    charged per worker beyond it; None where no trial measured that charge (then, as `run`, a flat share is kept)."""
    peaks = [int(t["worker_uss_peak_bytes"]) for t in trials
             if t.get("status") == "ok" and isinstance(t.get("worker_uss_peak_bytes"), int)]  # fmt: skip
    uncounted = [int(t["uncounted_per_worker_bytes"]) for t in trials
                 if isinstance(t.get("uncounted_per_worker_bytes"), int)]  # fmt: skip
    return shared_reserve(peaks, uncounted) if uncounted else None


def job_rate(trial: dict[str, Any], loop_s: float | None) -> float:
    """The training job's samples/s with this trial's loader and a loop of `loop_s` seconds per sample of its own.
    With workers, the slower of the loader and the loop's cycle: its step, and taking each batch off the result queue
    (the hand-over, on the same thread, where the trial timed it). Without, their times add: the process loads,
    then steps."""
    rate = float(trial["samples_per_s"])
    if not loop_s:
        return rate
    if not trial.get("num_workers"):
        return 1 / (1 / rate + loop_s)
    share = trial.get("main_handover_share")
    handover = float(share) / rate if isinstance(share, (int, float)) and not isinstance(share, bool) else 0.0
    return min(rate, 1 / (loop_s + handover))


def recommend(
    trials: list[dict[str, Any]], budget: int | None, tolerance: float, loop_s: float | None = None
) -> tuple[dict[str, Any] | None, str]:
    """The smallest configuration within `tolerance` of the best throughput whose projected memory fits; with the
    script's loop timed (`loop_s`, its seconds per sample), the smallest that delivers HEADROOM times what the loop
    takes where one does (more workers would only wait for the loop, and cost memory)."""
    ok = [t for t in trials if completed(t)]
    if not ok:
        return None, "no trial completed, so there is nothing to recommend (see each trial's status and error)"
    killed = [t["num_workers"] for t in trials if oom_killed(t) and t.get("num_workers")]
    per_worker = worker_reserve(trials)
    for t in trials:
        projected = t.get("projected_epoch_bytes")
        workers = t.get("num_workers") or 0
        if projected is not None:
            # Measured: each worker's; not measured: the flat share of the budget (loader_model/worker_memory.py).
            flat = int((1 - MEMORY_SHARE) * budget) if budget is not None else None
            t["reserve_bytes"] = workers * per_worker if per_worker is not None else flat
        t["fits_memory"] = fits(budget, projected, workers, per_worker)
        if killed and t.get("num_workers", 0) >= min(killed):  # as many workers as the OOM killer already ended
            t["fits_memory"] = False
    best = max(ok, key=lambda t: t["samples_per_s"])
    for t in ok:
        t["vs_best"] = round(t["samples_per_s"] / best["samples_per_s"], 3)
    fitting = [t for t in ok if t["fits_memory"] is not False]
    if not fitting:
        return None, "every completed configuration is projected to need more memory than is available"
    best_fit = max(fitting, key=lambda t: t["samples_per_s"])
    close = [t for t in fitting if t["samples_per_s"] >= (1 - tolerance) * best_fit["samples_per_s"]]
    fed: list[dict[str, Any]] = []
    if loop_s:
        for t in ok:
            t["job_samples_per_s"] = round(job_rate(t, loop_s), 2)
        # Workers that keep ahead of the loop; without workers, a load too small to slow the loop's cycle.
        fed = [t for t in fitting if (keeps_up(t["samples_per_s"], loop_s, tolerance) if t["num_workers"]
                                      else t["job_samples_per_s"] * loop_s >= 1 - tolerance)]  # fmt: skip
        close = fed or close
    chosen = min(close, key=preference)
    loop_bound = bool(fed)
    if loop_bound and loop_s:
        reason = (
            f"{_setting(chosen)} delivers {chosen['samples_per_s']:,.0f} samples/s, ahead of the {1 / loop_s:,.0f} "
            "samples/s the training loop's own step takes (timed before the trials): the loop, not the loader, bounds "
            f"the job, and more workers would only wait for it (the fastest loader measured: "
            f"{best['samples_per_s']:,.0f} samples/s with {_setting(best, pin=False)}"
            + (f", which needs {_mib(best.get('projected_epoch_bytes'))}, more than fits)" if best_fit is not best
               else ")")
        )  # fmt: skip
    else:
        reason = (
            f"{_setting(chosen)} reached {chosen['samples_per_s']:,.0f} samples/s, {100 * chosen['vs_best']:.0f}% of "
            f"the best measured ({best['samples_per_s']:,.0f} samples/s with {_setting(best, pin=False)}); it is the "
            f"smallest configuration within {100 * tolerance:.0f}% of the best"
        )
    if best_fit is not best and not loop_bound:
        reason += f" among those whose memory fits (the fastest needs {_mib(best.get('projected_epoch_bytes'))})"
    slower = [t for t in fitting if t["num_workers"] < chosen["num_workers"] and t["stage"] == "workers"]
    if slower and loop_bound and loop_s:
        prev = max(slower, key=lambda t: t["num_workers"])
        if prev["num_workers"]:
            reason += (f"; num_workers={prev['num_workers']} delivers {prev['samples_per_s']:,.0f} samples/s, short "
                       f"of {HEADROOM:g}x the loop's rate (its headroom for a slow batch)")  # fmt: skip
        else:  # however fast it loads, it loads between the steps, not beside them
            job = prev["job_samples_per_s"]
            reason += (f"; with num_workers=0 the process loads between its steps, and the job would run at {job:,.0f} "
                       f"samples/s, {100 * (1 - job * loop_s):.0f}% under the loop's rate")  # fmt: skip
    elif slower:
        prev = max(slower, key=lambda t: t["num_workers"])
        reason += f"; num_workers={prev['num_workers']} was {100 * (1 - prev['vs_best']):.0f}% slower than the best"
    if chosen.get("projected_epoch_bytes") is not None and budget:
        reason += (
            f". Projected memory for a full epoch: {_mib(chosen['projected_epoch_bytes'])} of {_mib(budget)} available"
        )
    return chosen, reason + "."


def _setting(trial: dict[str, Any], pin: bool = True) -> str:
    """num_workers, and prefetch_factor with workers, and pin_memory where set (`pin`), as DataLoader takes them."""
    words = f"num_workers={trial['num_workers']}"
    words += f", prefetch_factor={trial['prefetch_factor']}" if trial["num_workers"] else ""
    return words + (", pin_memory=True" if pin and trial["pin_memory"] else "")


def confirm_words(trials: list[dict[str, Any]], keys: list[str], tolerance: float) -> str | None:
    """The note on the configurations measured once more before the recommendation: each one's readings in order."""
    read = []
    for key in keys:
        trial = next((t for t in trials if t.get("key") == key), None)
        rates, statuses = (trial or {}).get("repeated_rates") or [], (trial or {}).get("repeated_statuses") or []
        if trial is None or len(rates) < 2:
            continue
        # statuses padded: a record of an older dlprobe has rates only
        readings = [f"{r:,.0f}" if isinstance(r, (int, float)) and r else f"no rate ({status})"
                    for r, status in zip(rates, [*statuses, *[None] * len(rates)], strict=False)]  # fmt: skip
        read.append(f"{_setting(trial)}: " + " then ".join(readings) + " samples/s")
    if not read:
        return None
    return (f"measured again before recommending, since the pick (the smallest configuration within "
            f"{100 * tolerance:.0f}% of the best) was within it on a single reading of the best: {'; '.join(read)}; "
            "other work only slows a trial, so each one's faster completed reading counts")  # fmt: skip


def _mib(n: int | None) -> str:
    return "?" if n is None else f"{n / 2**20:,.0f} MiB"


def batches_per_epoch(info: dict[str, Any] | None) -> int | None:
    value = (info or {}).get("batches_per_epoch")
    return int(value) if isinstance(value, int) and value > 0 else None
