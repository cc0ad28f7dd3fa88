"""Which num_workers to measure next: a model of the throughput curve, re-fitted after every trial, measured where
it matters."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.loader_model.limits import CPU_BOUND_SHARE, HEADROOM, IO_BOUND_WAIT
from dlprobe.loader_model.rate import cores_left as left_to_loader
from dlprobe.loader_model.rate import knee as knee_of
from dlprobe.loader_model.rate import limit_of, predicted_rate, rate_bounds
from dlprobe.tune.loop import keeps_up
from dlprobe.tune.plan import completed, oom_killed, preference

# Two trials of the same count on a loaded machine differ by about this share: within it a measured rate agrees with
# the model, and a rate this much below the model's is a bound the model missed.
NOISE = 0.08
FIRST_COUNTS = (0, 1)  # the main process alone, then one worker: its rate and its CPU per sample
REPEAT_BELOW = 0.25  # a trial this far under its prediction, and slower than fewer workers, is measured again
HELD_IDLE = 0.15  # workers idle this share of a trial, not asleep on reads, with cores to spare: held by the order
HELD_RUNQ = 0.1  # ...and not queued for a core this share of it (then the cores are full, whatever they read)
MAIN_SPAN = 3.0  # the main process's cost is split into per-sample and fixed only over rates this far apart
UNFINISHED = ("too-slow", "hung", "crashed")  # a count that gave no rate: the search stays at half of it or below


def _ok(trial: dict[str, Any]) -> bool:
    return completed(trial) and trial.get("stage") == "workers"


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass
class Model:
    """Throughput(n) = min(n workers asleep part of each sample and queued for the cores the rest (queueing.py),
    one core over the main process's CPU per sample, a bound the trials measured). The queueing curve runs under
    its two asymptotes, n / one worker's time per sample and the cores left over the CPU per sample of a worker and
    of the main process; bounds() names those, rate() is the curve."""

    worker_s: float  # one worker's wall time per sample (the 1-worker trial, queueing included)
    worker_cpu_s: float | None  # a worker's CPU seconds per sample; None: not read (the cores bound nothing)
    main_cpu_s: float | None  # the main process's CPU seconds per sample while workers load (receiving batches)
    cores: int  # usable cores
    cores_left: float  # of them, what other work on the machine left to the loader (queueing at 1 worker)
    measured_cap: float | None = None  # the best rate where trials fell below the model, confirmed: a missed bound
    main_fixed: float = 0.0  # the share of a core the main process uses at any rate (main_cost)
    handover_s: float | None = None  # the main process's wall time per sample taking batches off the result queue
    cpu_read_at: int = 1  # the worker count worker_cpu_s was read at (worker_cpu)

    def bounds(self, n: int) -> dict[str, float]:
        # The bounds are dlprobe/loader_model/rate.py's, which `run`'s advice uses too: the two never disagree.
        return rate_bounds(n, self.worker_s, self.worker_cpu_s, self.main_cpu_s, self.cores_left, self.measured_cap,
                           main_fixed=self.main_fixed, handover_s=self.handover_s)  # fmt: skip

    def rate(self, n: int) -> float:
        return predicted_rate(n, self.worker_s, self.worker_cpu_s, self.main_cpu_s, self.cores, self.cores_left,
                              self.measured_cap, main_fixed=self.main_fixed, handover_s=self.handover_s)  # fmt: skip

    def limit(self, n: int) -> str:
        return limit_of(self.bounds(n))

    def summary(self) -> dict[str, Any]:
        cpu = (self.worker_cpu_s or 0.0) + (self.main_cpu_s or 0.0)
        return {
            "worker_samples_per_s": round(1 / self.worker_s, 2),
            "cpu_ms_per_sample": round(1000 * self.worker_cpu_s, 4) if self.worker_cpu_s is not None else None,
            "cpu_read_at_workers": self.cpu_read_at,
            "main_cpu_ms_per_sample": round(1000 * self.main_cpu_s, 4) if self.main_cpu_s is not None else None,
            "main_fixed_share": round(self.main_fixed, 3),
            "usable_cores": self.cores,
            "cores_left": round(self.cores_left, 2),
            "cores_limit_workers": round(self.cores_left * self.worker_s / cpu, 1) if cpu > 0 else None,
            "measured_cap_samples_per_s": None if self.measured_cap is None else round(self.measured_cap, 1),
            "handover_ms_per_sample": None if self.handover_s is None else round(1000 * self.handover_s, 4),
        }


def fit(trials: list[dict[str, Any]], cores: int) -> Model | None:
    """The model from the 1-worker trial, its bound lowered to what larger trials measured below it once that is
    confirmed (`_confirmed`); None without a completed 1-worker trial."""
    one = next((t for t in trials if _ok(t) and t.get("num_workers") == 1), None)
    if one is None:
        return None
    rate = float(one["samples_per_s"])
    cpu_share, runq_share = _num(one.get("worker_cpu_share")), _num(one.get("worker_runq_share"))
    main_cpu_s, main_fixed = main_cost(trials)
    cores_left = left_to_loader(cores, cpu_share, runq_share, _num(one.get("worker_busy_share")))
    cpu_at, worker_cpu_s = worker_cpu(trials)
    model = Model(
        worker_s=1 / rate,
        worker_cpu_s=worker_cpu_s,
        cpu_read_at=cpu_at,
        main_cpu_s=main_cpu_s,
        cores=cores,
        cores_left=min(float(cores), cores_left),
        main_fixed=main_fixed,
        handover_s=handover_seconds(trials),
    )
    measured = [(int(t["num_workers"]), float(t["samples_per_s"])) for t in trials if _ok(t) and t["num_workers"] > 0]
    cpu = (model.worker_cpu_s or 0.0) + (model.main_cpu_s or 0.0)
    above = [r * cpu + model.main_fixed for n, r in measured
             if r > (1 + NOISE) * model.rate(n) and model.limit(n) == "cores"]  # fmt: skip
    if above:
        # More workers took more of the cores from the other work than one worker's queueing said: what they used is
        # what the cores left hold (never more than the usable cores).
        model.cores_left = min(float(cores), max(above))
    if _confirmed(_below(trials, model)):
        model.measured_cap = max(r for _, r in measured)  # flat from there: the best any trial reached
    return model


def worker_cpu(trials: list[dict[str, Any]]) -> tuple[int, float | None]:
    """A worker's CPU seconds per sample, and the count it was read at: the most workers measured with their CPU read,
    where the cores are nearest full, which is what the cores bound is about. One worker that sleeps between samples
    pays more per sample than many that keep the cores busy: a skewed loader's read 0.094 ms at 1 worker and 0.065 at
    29, and the cores bound from the first stopped tune at 29 workers where 32 ran 9% faster."""
    read = [t for t in trials if _ok(t) and t["num_workers"] > 0 and _num(t.get("worker_cpu_share")) is not None]
    if not read:
        return 1, None
    most = max(read, key=lambda t: int(t["num_workers"]))
    n = int(most["num_workers"])
    return n, float(most["worker_cpu_share"]) * n / float(most["samples_per_s"])


def main_cost(trials: list[dict[str, Any]]) -> tuple[float | None, float]:
    """The main process's CPU seconds per sample, and the share of a core it uses at any rate: a line through its CPU
    share against the rate over the worker trials, where their rates span MAIN_SPAN; else the first worker trial's
    share over its rate (the 1-worker trial, measured first; all of it per sample; None where it was not read).

    Its other threads (the probe's among them) take a few percent of a core whatever the rate: at one worker's few
    dozen batches a second that is half its CPU per sample. On 16 cores a mixed loader read 0.096 ms per sample at 1
    worker and 0.047 at 23, and the main bound of the first (10,400 samples/s) stopped tune where 32 workers ran 15,500.
    """
    points = [(float(t["samples_per_s"]), float(t["main_cpu_share"])) for t in trials
              if _ok(t) and t["num_workers"] > 0 and _num(t.get("main_cpu_share")) is not None]  # fmt: skip
    one = next((share / rate for rate, share in points if rate > 0), None)
    rates = [r for r, _ in points]
    if len(points) < 2 or max(rates) < MAIN_SPAN * min(rates):
        return one, 0.0
    mean_r, mean_s = sum(rates) / len(points), sum(s for _, s in points) / len(points)
    slope = sum((r - mean_r) * (s - mean_s) for r, s in points) / sum((r - mean_r) ** 2 for r in rates)
    fixed = mean_s - slope * mean_r
    if slope <= 0 or not 0.0 <= fixed < 1.0:
        return max(s / r for r, s in points), 0.0  # no line to trust: the dearest reading, all of it per sample
    return slope, fixed


def _below(trials: list[dict[str, Any]], model: Model) -> list[dict[str, Any]]:
    """Trials of more than one worker that measured more than NOISE under the model: a bound it missed, or other
    work that starved the trial."""
    return [t for t in trials if _ok(t) and t["num_workers"] > 1
            and t["samples_per_s"] < (1 - NOISE) * model.rate(int(t["num_workers"]))]  # fmt: skip


def _confirmed(below: list[dict[str, Any]]) -> bool:
    """Whether trials under the model show a bound, not a busy moment: one stayed under it when measured again
    (other work only ever slows a trial, so its best of two is the loader's rate), or two counts under it agree on
    their rate within NOISE (a flat curve). One trial alone would flatten the whole curve on one starved window."""
    if any(t.get("repeats") for t in below):
        return True
    by_count = {int(t["num_workers"]): float(t["samples_per_s"]) for t in below}  # one rate per count
    rates = sorted(by_count.values())
    return any(high <= (1 + NOISE) * low for low, high in zip(rates, rates[1:], strict=False))


def _unconfirmed(trials: list[dict[str, Any]], model: Model) -> dict[str, Any] | None:
    """The trial to measure again before the curve is capped at its rate: the largest count under the model, while
    no cap is set (fit sets one once the trials under the model confirm a bound, `_confirmed`)."""
    if model.measured_cap is not None:
        return None
    below = _below(trials, model)
    return max(below, key=lambda t: int(t["num_workers"])) if below else None


def handover_seconds(trials: list[dict[str, Any]]) -> float | None:
    """The main process's hand-over seconds per sample, from the trial with the most workers that timed it: each
    worker's threads that send a batch's tensors compete with more workers for the cores and for their own GIL, so
    the hand-over grows with the count (on 2 cores, 64 small tensors a batch: 10 ms a batch at 1 worker, 17 ms
    at 3 and more) and is read where it bounds. Not from CPU-bound workers: the thread that sends a tensor waits
    for the GIL its own worker holds computing the next batch (one CPU-bound worker: the whole batch's time), which
    is the worker's time, already in its rate, and shrinks as more workers leave each one idle part of the time."""
    timed = [t for t in trials if _ok(t) and t["num_workers"] > 0 and _num(t.get("main_handover_share"))
             and _waiting_at_times(t)]  # fmt: skip
    if not timed:
        return None
    last = max(timed, key=lambda t: t["num_workers"])  # ties: the first, as tried
    # Never a bound below a rate some count measured: past the cores the hand-over also waits for a core (20 workers
    # of the mixed loader on 2 busy cores: 3,064 samples/s where 10 workers measured 3,909), which the cores bound
    # already says; a rate measured is a rate the hand-over allowed.
    best = max(float(t["samples_per_s"]) for t in trials if _ok(t) and t["num_workers"] > 0)
    return min(float(last["main_handover_share"]) / float(last["samples_per_s"]), 1 / best)


def _waiting_at_times(trial: dict[str, Any]) -> bool:
    """Whether the trial's workers were measured and not CPU-bound (asleep or idle part of their time)."""
    busy = _num(trial.get("worker_busy_share"))
    return busy is not None and busy < CPU_BOUND_SHARE


@dataclass
class Step:
    """The next trial (num_workers, or None to stop), why, and the model's rate for it before it runs."""

    num_workers: int | None
    reason: str
    predicted: float | None = None
    model: Model | None = None
    limit_reason: str | None = None  # what bounds the counts tried: cap, oom, memory, or the loop's own step
    repeat: bool = False  # measure this count again (its first trial fell far below the model and a smaller count)


def worker_limit(trials: list[dict[str, Any]], cap: int) -> tuple[int, str, str]:
    """The most workers worth trying, what sets it (cap, unfinished, oom, memory, duplicates) and why in words: the
    cap, half a count that did not finish, one fewer than a count the OOM killer ended, the workers the memory left
    holds (read at each trial's end), one where workers repeat an IterableDataset's stream."""
    limit, kind, why = cap, "cap", f"the cap of {cap} workers (--max-workers, or dlprobe's limit of workers to try)"
    repeated = [int(t["num_workers"]) for t in trials if t.get("status") == "duplicates"]
    if repeated and limit > 1:
        # An IterableDataset that does not split its stream by worker: every worker yields it whole, at any count.
        limit, kind = 1, "duplicates"
        why = f"num_workers={min(repeated)} yielded repeated samples (an IterableDataset not split by worker)"
    workers = [t for t in trials if t.get("stage") == "workers" and t.get("num_workers", 0) > 1]
    failed = {int(t["num_workers"]): t["status"] for t in workers if t.get("status") in UNFINISHED}
    if failed and min(failed) // 2 < limit:
        # Too many workers to start and time within a trial's share of the budget (or they crashed or hung): half as
        # many, not one fewer, so a machine too busy to start them costs a trial or two, not a cascade.
        n = min(failed)
        limit, kind = max(1, n // 2), "unfinished"
        why = f"num_workers={n} did not complete ({failed[n]})"
    killed = [int(t["num_workers"]) for t in trials if oom_killed(t)]
    if killed and min(killed) - 1 < limit:
        limit, kind = min(killed) - 1, "oom"
        why = f"num_workers={min(killed)} was killed by the kernel's OOM killer, so more would be too"
    fits = [int(t["workers_that_fit_memory"]) for t in trials if isinstance(t.get("workers_that_fit_memory"), int)]
    if fits and min(fits) < limit:
        limit, kind, why = max(1, min(fits)), "memory", f"only {min(fits)} workers fit the memory left"
    return limit, kind, why


def next_step(
    trials: list[dict[str, Any]], cores: int, cap: int, tolerance: float, loop_s: float | None = None
) -> Step:
    """The next worker count to measure: 0 and 1 first; then the model's knee (the fewest workers it predicts
    within `tolerance` of its bound); then, with the best measured within NOISE of the bound, the next count past
    the best (double it while the workers wait, one more while they compute) until a step up stops paying.

    `loop_s`: the script's own loop's seconds per sample (its training step, timed before the take-over). The
    trials time the loader alone, so the model stays the loader's; the search stops once a count delivers HEADROOM
    times what the loop takes, since more workers would only wait for the loop (and cost memory)."""
    tried = {int(t["num_workers"]) for t in trials if t.get("stage") == "workers" and t.get("status") != "skipped"}
    for n in FIRST_COUNTS:
        if n not in tried and n <= cap:
            return Step(n, "the main process alone" if n == 0 else "one worker: its rate and CPU per sample")
    model = fit(trials, cores)
    if model is None:
        return Step(None, "stopped: num_workers=1 did not complete, so there is no curve to follow")
    suspect = _suspect(trials)
    if suspect is not None:
        rate, predicted = suspect["samples_per_s"], suspect["predicted_samples_per_s"]
        why = (f"re-measured: slower than fewer workers and far below the model ({rate:,.0f} against "
               f"{predicted:,.0f} samples/s): other work's load comes and goes")  # fmt: skip
        return Step(int(suspect["num_workers"]), why, suspect["predicted_samples_per_s"], model, repeat=True)
    limit, kind, limit_why = worker_limit(trials, cap)
    unconfirmed = _unconfirmed([t for t in trials if t.get("num_workers", 0) <= limit], model)
    if unconfirmed is not None:  # a count past the limit (memory, OOM) is not measured again
        n = int(unconfirmed["num_workers"])
        why = (f"re-measured: {unconfirmed['samples_per_s']:,.0f} samples/s is far below the model's "
               f"{model.rate(n):,.0f}; measured once, it may be other work's load, not a bound")  # fmt: skip
        return Step(n, why, _predicted(unconfirmed, model), model, repeat=True)
    if limit < 2:
        return Step(None, f"stopped at num_workers=1: {limit_why}", model=model, limit_reason=kind)
    bound = model.rate(limit)
    alone = next((float(t["samples_per_s"]) for t in trials if _ok(t) and t["num_workers"] == 0), None)
    if alone is not None and bound < (1 - tolerance) * alone:
        # Handing batches over from workers costs more than building them in the main process, at any count.
        stop = (f"stopped at num_workers=1: the model's bound up to num_workers={limit}, {bound:,.0f} samples/s, is "
                f"below the {alone:,.0f} samples/s of the main process alone")  # fmt: skip
        return Step(None, stop, model=model, limit_reason=kind)
    enough = HEADROOM / loop_s if loop_s else None  # what keeps the loop fed, with a slow batch's headroom
    found = knee_of(model.rate, bound if enough is None else min(bound, enough), tolerance, 1, limit)
    knee = limit if found is None else found
    ok = {int(t["num_workers"]): t for t in trials if _ok(t) and t["num_workers"] > 0}
    fed = [n for n in ok if n <= limit and keeps_up(ok[n]["samples_per_s"], loop_s, tolerance)]
    if fed and loop_s:
        n = min(fed)
        stop = (f"stopped: num_workers={n} delivers {ok[n]['samples_per_s']:,.0f} samples/s, "
                f"ahead of the {1 / loop_s:,.0f} samples/s the training loop's own step takes; more workers would "
                "wait for the loop")  # fmt: skip
        return Step(None, stop, model=model, limit_reason="loop")
    cpu_bound = _cpu_bound_at_cores(ok, trials, model, kind)
    if cpu_bound is not None and knee > max(ok, key=lambda n: ok[n]["samples_per_s"]):
        # The best is at the cores with its workers computing or queued for one: a knee past it is the model
        # following the cores taken from other work (3 workers on 2 busy cores read 716 samples/s where 2 read 558),
        # the neighbours' time, not a rate the loader has on the cores it may use.
        return cpu_bound
    if knee not in tried:
        words = _knee_words(model, knee, bound, limit)
        if loop_s and enough is not None and enough < bound:
            words += f"; the training loop's own step takes {1 / loop_s:,.0f} samples/s"
        return Step(knee, words, model.rate(knee), model, kind)
    best_n = max(ok, key=lambda n: ok[n]["samples_per_s"])
    best = float(ok[best_n]["samples_per_s"])
    if best < (1 - NOISE) * (1 - tolerance) * bound and limit not in tried:
        # Nothing measured reaches the model's bound and no trial showed a bound it missed: measure the bound itself.
        below = f"the best measured ({best:,.0f} samples/s) is below the model's bound"
        return Step(limit, below, model.rate(limit), model, kind)
    busy = _busy(ok[best_n], trials)
    waiting = busy is not None and 1 - busy >= IO_BOUND_WAIT
    held = not waiting and _held_back(ok[best_n], model)
    up = min(limit, 2 * best_n if waiting or held else best_n + 1)
    state = f"{_asleep(busy)}; best measured {best:,.0f} samples/s at num_workers={best_n}"
    if (cpu_bound := _cpu_bound_at_cores(ok, trials, model, kind)) is not None:
        return cpu_bound
    # Past the best only where it may pay: the model predicts a gain beyond the noise, or the best beat the model
    # (its bound is too low here, so the count above may beat it too).
    # Or the best's workers sat idle with cores to spare: something the model has no term for held them.
    worth = model.rate(up) >= (1 + NOISE) * model.rate(best_n) or best > (1 + NOISE) * _predicted(ok[best_n], model)
    # Or the curve is capped at a rate measured at or below the best, and the best is the most workers measured: the
    # cap says nothing measured about more workers. A skewed loader's 30 workers read 15,400 samples/s twice and capped
    # the curve there, where 31 and 32 ran 19,000 (its dear samples fall on every 5th batch: 30 workers each get the
    # same kind of batch, and the dear ones hold the in-order queue): one count past the best checks the cap.
    unchecked = model.measured_cap is not None and best_n == max(ok)
    if up > best_n and up not in tried and (worth or held or unchecked):
        step = (
            f"the cap of {model.measured_cap:,.0f} samples/s was measured up to num_workers={best_n} only"
            if not (worth or held)
            else "doubling while the workers wait"
            if waiting
            else "doubling: the workers sat idle with cores to spare"
            if held
            else "one more while the workers compute"
        )
        return Step(up, f"past the best ({step}): {state}", model.rate(up), model, kind)
    if best_n >= limit or (up >= limit and up not in tried):
        bounded = "" if best_n >= limit else f"; the model predicts under {100 * NOISE:.0f}% more up to the limit"
        stop = f"stopped at num_workers={best_n}: {state}{bounded}; {limit_why}"
        return Step(None, stop, model=model, limit_reason=kind)
    if up not in tried:
        stop = f"stopped at num_workers={best_n}: {state}; the model predicts under {100 * NOISE:.0f}% more past it"
        return Step(None, stop, model=model, limit_reason=kind)
    status = next((t.get("status") for t in trials if t.get("stage") == "workers" and t["num_workers"] == up), "ok")
    outcome = "did not pay" if status in ("ok", "duplicates") else f"did not complete ({status})"
    stop = f"stopped at num_workers={best_n}: {state}, and num_workers={up} {outcome}"
    return Step(None, stop, model=model, limit_reason=kind)


def _cpu_bound_at_cores(ok: dict[int, dict[str, Any]], trials: list[dict[str, Any]], model: Model,
                        kind: str) -> Step | None:  # fmt: skip
    """The stop where the best measured count is at the usable cores or past them and its workers computed (or
    queued for a core) CPU_BOUND_SHARE of their time, not held back by the order: more workers would only queue.
    At the usable cores, not the cores other work left: that share moves with the machine's load."""
    if not ok:
        return None
    best_n = max(ok, key=lambda n: ok[n]["samples_per_s"])
    busy = _busy(ok[best_n], trials)
    if busy is None or busy < CPU_BOUND_SHARE or best_n < model.cores or _held_back(ok[best_n], model):
        return None
    state = (
        f"{_asleep(busy)}; best measured {float(ok[best_n]['samples_per_s']):,.0f} samples/s at num_workers={best_n}"
    )
    return Step(None, f"stopped at num_workers={best_n}: {state}: CPU-bound at the cores, more workers would only "
                "queue for them", model=model, limit_reason=kind)  # fmt: skip


def to_confirm(
    trials: list[dict[str, Any]], cap: int, tolerance: float, loop_s: float | None = None
) -> list[dict[str, Any]]:
    """The trials to measure once more before tune recommends: the pick (the preferred configuration within
    `tolerance` of the best) and the best, where they differ and the best was read once, the pick too where it was
    read once. Other work on the machine only ever slows a trial, so one low reading of the best makes a smaller
    configuration look as fast: a skewed loader's 29 workers read within 5% of 32, where a plain loop timed them 9%
    apart in every round. (A best read twice keeps the pick within tolerance whatever the pick reads again.) None
    where the loop bounds the job (the pick is then the fewest workers that keep up with it), and none past the
    workers the memory holds, as the search knows it (tune/results.py's recommend() has the projected epoch too), or
    the OOM killer left."""
    limit = worker_limit(trials, cap)[0]
    ok = [t for t in trials if completed(t) and t["num_workers"] <= limit]
    if not ok or any(t["num_workers"] and keeps_up(t["samples_per_s"], loop_s, tolerance) for t in ok):
        return []
    best = max(ok, key=lambda t: t["samples_per_s"])
    pick = min((t for t in ok if t["samples_per_s"] >= (1 - tolerance) * best["samples_per_s"]), key=preference)
    if pick is best or best.get("repeats"):
        return []
    return [t for t in (pick, best) if not t.get("repeats")]


def _suspect(trials: list[dict[str, Any]]) -> dict[str, Any] | None:
    """A trial to measure once more: slower than a smaller count and more than REPEAT_BELOW under what the model
    predicted for it. Other work on the machine only ever slows a trial, so its best of two is the loader's rate."""
    ok = [t for t in trials if _ok(t) and t["num_workers"] > 0]
    for t in ok:
        predicted = _num(t.get("predicted_samples_per_s"))
        smaller = [u["samples_per_s"] for u in ok if u["num_workers"] < t["num_workers"]]
        if (
            predicted
            and not t.get("repeats")
            and smaller
            and t["samples_per_s"] < min(max(smaller), (1 - REPEAT_BELOW) * predicted)
        ):
            return t
    return None


def _held_back(trial: dict[str, Any], model: Model) -> bool:
    """Whether a trial's workers sat idle HELD_IDLE of their time while the cores and the main process had room: not
    on a CPU, not asleep on reads (that is `waiting`), not queued for a core, but waiting for their next index behind
    the in-order queue while neither the main process's CPU nor its hand-over bounds the rate. More workers put more
    batches in flight, which the model (cores, main, workers) cannot say.

    On 16 cores a CPU-bound loader's 14 workers were idle 21% with 11.5 of the cores busy; 28 ran 10-15% faster."""
    busy, cpu, main = (_num(trial.get(k)) for k in ("worker_busy_share", "worker_cpu_share", "main_cpu_share"))
    if busy is None or cpu is None or main is None or 1 - busy < HELD_IDLE or main >= CPU_BOUND_SHARE:
        return False
    n = int(trial["num_workers"])
    if (_num(trial.get("worker_runq_share")) or 0.0) >= HELD_RUNQ or model.limit(n) in ("main", "handover"):
        # Queued for a core: other work fills the cores the cores left do not show. The main process's one thread
        # (its CPU or its hand-over) saturated: more workers cannot shorten it.
        return False
    return n * cpu + main <= (1 - NOISE) * model.cores_left


def _predicted(trial: dict[str, Any], model: Model) -> float:
    """What the search predicted for a trial before it ran, else the model's rate for its count now."""
    value = _num(trial.get("predicted_samples_per_s"))
    return value if value is not None else model.rate(int(trial["num_workers"]))


def _busy(trial: dict[str, Any], trials: list[dict[str, Any]]) -> float | None:
    """The trial's workers' busy share, or where its window was too short to read, the last count that was read."""
    busy = _num(trial.get("worker_busy_share"))
    if busy is not None:
        return busy
    read = [_num(t.get("worker_busy_share")) for t in sorted(trials, key=lambda t: t.get("num_workers") or 0)]
    known = [b for b in read if b is not None]
    return known[-1] if known else None


def _asleep(busy: float | None) -> str:
    return "workers' CPU not measured" if busy is None else f"workers asleep {100 * (1 - busy):.0f}% of their time"


def _knee_words(model: Model, knee: int, bound: float, limit: int) -> str:
    return (
        f"the model's knee: {knee} worker(s) predicted {model.rate(knee):,.0f} samples/s of a bound of {bound:,.0f} "
        f"(set by {model.limit(limit)}) up to num_workers={limit}"
    )
