"""`run`'s advice and `tune`'s search read the same evidence through one model (loader_model/rate.py): they predict
the same rate, and `run` bounds by the main process's CPU and the cores other work leaves as tune does."""

from __future__ import annotations

from typing import Any

import pytest

from dlprobe.analysis.findings.throughput import find_input_bound, find_too_many_workers, plan_workers
from dlprobe.analysis.measures.loop_timing import LoopTiming, loop_timing
from dlprobe.analysis.measures.worker_cpu import LoaderCpu, loader_cpu, main_cpu_share
from dlprobe.analysis.run.model import Epoch, ProcessRecord, RunData
from dlprobe.loader_model.limits import KNEE_SHORT, WORKER_CAP
from dlprobe.loader_model.rate import knee, limit_of, predicted_rate, rate_bounds
from dlprobe.tune.search import fit, next_step
from dlprobe.units import MiB
from tests.unit.fakes import cpu_series, loader, run, worker

WAIT_S, STEP_S, BATCHES = 0.08, 0.0, 40  # the loop waits 80 ms per batch and has no work of its own
BATCH = 8  # fakes.loader's batch_size


def _starved(num_workers: int, cpu: float, runq: float, main: float | None, handover_s: float | None = None) -> RunData:
    """A starved loop whose workers are on a CPU `cpu` and queued `runq` of their time, its main process on a CPU
    `main` of the time (None: the main process was never read) and `handover_s` of each batch taking it in."""
    end = 100.0 + BATCHES * (WAIT_S + STEP_S)
    handovers = [] if handover_s is None else [handover_s] * BATCHES
    epoch = Epoch(0, 100.0, 0.0, t_end=end, batches=BATCHES, waits=[WAIT_S] * BATCHES, handovers=handovers)
    procs = [worker(1000 + k, k, cpu_series(100.0, end, cpu, runq)) for k in range(num_workers)]
    if main is not None:
        procs.append(ProcessRecord(1, "main", comm="python", series=cpu_series(100.0, end, main, 0.0)))
    r = run([loader(num_workers=num_workers, epochs=[epoch])], procs)
    r.meta["machine"]["usable_cores"] = 2
    return r


def _as_run_and_as_trial(
    cpu: float, runq: float, main: float | None
) -> tuple[LoaderCpu, LoopTiming, float | None, dict[str, Any]]:
    """One worker as `run` measured it (its CPU, the loop's timing, the main process's share) and as tune's 1-worker
    trial of the same readings."""
    r = _starved(1, cpu, runq, main)
    measured, timing = loader_cpu(r, r.loaders[0]), loop_timing(r.loaders[0])
    assert measured is not None and timing is not None
    share = main_cpu_share(r, r.loaders[0])
    trial = {"status": "ok", "stage": "workers", "num_workers": 1, "samples_per_s": BATCH / (WAIT_S + STEP_S),
             "worker_cpu_share": measured.cpu_share, "worker_runq_share": measured.runq_share,
             "worker_busy_share": measured.busy_share, "main_cpu_share": share}  # fmt: skip
    return measured, timing, share, trial


@pytest.mark.parametrize(("cpu", "runq", "main"), [(0.05, 0.0, 0.02), (0.3, 0.4, 0.05), (0.5, 0.0, 0.6),
                                                   (0.05, 0.02, 0.9), (0.9, 0.05, None)])  # fmt: skip
def test_run_and_tune_predict_the_same_rate_from_the_same_evidence(cpu, runq, main):
    """One worker measured by `run` and the same worker as tune's 1-worker trial: the same rate at every count."""
    measured, timing, share, trial = _as_run_and_as_trial(cpu, runq, main)
    model = fit([trial], cores=2)
    assert model is not None
    plan = plan_workers(1, timing, measured, 2, None, share)
    assert plan.cores_left == pytest.approx(model.cores_left)
    for n in (1, 2, 4, 8, 16):
        ran = plan_workers(1, timing, measured, 2, n, share)  # memory holds n: the plan is evaluated at n
        assert ran.workers <= n
        if ran.workers == n and n > 1:
            assert BATCH * ran.batches_per_s == pytest.approx(model.rate(n), rel=0.02), (n, model.bounds(n))


def test_a_main_process_that_receives_on_a_full_core_bounds_io_bound_workers():
    # asleep workers would scale to the cap, but the main process is on a CPU 95% of the time at 2 workers
    [finding] = find_input_bound(_starved(2, 0.05, 0.0, 0.95))
    e = finding.evidence
    assert e["bound"] == "I/O-bound" and e["main_cpu_share"] == pytest.approx(0.95, abs=0.02)
    assert e["model_limit"] == "main" and e["suggested_num_workers"] <= 3 and e["model_limits"]["cap"] == WORKER_CAP
    [quiet] = find_input_bound(_starved(2, 0.05, 0.0, 0.02))  # a main process that barely works: the cap decides
    assert quiet.evidence["model_limit"] == "cap" and quiet.evidence["suggested_num_workers"] == WORKER_CAP


def test_a_main_process_that_fills_the_cores_is_said_never_more_workers_will_not_help():
    r = _starved(2, 0.05, 0.0, 1.0)
    [finding] = find_input_bound(r)
    assert finding.evidence["suggested_num_workers"] <= 3
    if finding.evidence["suggested_num_workers"] == 2:
        assert "will not help" not in finding.fix and "main process" in finding.fix


def test_asleep_workers_queued_behind_other_work_are_not_too_many():
    # on a CPU 24%, queued 43% (another job's load): 4 workers want about one core of the 2
    assert find_too_many_workers(_starved(4, 0.24, 0.43, 0.05)) == []
    [finding] = find_too_many_workers(_starved(4, 0.3, 0.68, 0.05))  # wanting a core all the time: too many
    assert finding.evidence["workers_that_fit_cores"] == 2  # the 0.6 core left over 0.3 each


def test_a_table_loaded_at_start_is_not_projected_as_growth_over_the_epoch():
    """Each worker loads 350 MiB in worker_init_fn, then stays flat; the run stopped 1/20 into the epoch."""
    epoch = Epoch(0, 100.0, 0.0, batches=5, waits=[0.01] * 5)  # never ended: the loop broke out early
    rising = [10 * MiB, 150 * MiB, 300 * MiB, 360 * MiB] + [360 * MiB] * 8
    procs = []
    for k in range(2):
        s = cpu_series(100.0, 100.0 + len(rising) - 1, 0.05, every=1.0)
        s.uss, s.rss = list(rising), [v + 100 * MiB for v in rising]
        procs.append(worker(1000 + k, k, s))
    lo = loader(num_workers=2, epochs=[epoch])
    lo.config["dataset"]["len"] = 100 * BATCH  # 100 batches: growth so far would be extended 20 times
    r = run([lo], procs)
    r.system.cgroup_limit = 1800 * MiB
    assert find_too_many_workers(r) == []


def test_partly_cpu_bound_workers_queued_behind_other_work_are_told_their_cpu_not_more_cores_than_there_are():
    # on a CPU 30%, queued 38% (another job's load): 4 workers use 1.2 of the 2 cores, not "2.7 of 2"
    [finding] = find_input_bound(_starved(4, 0.3, 0.38, 0.05))
    assert finding.evidence["bound"] == "partly CPU-bound"
    assert "on a CPU only 30% of their time (1.2 of 2 usable core(s) in all" in finding.fix, finding.fix
    assert "queued for a core 38%, behind other work" in finding.fix


def test_the_knee_is_the_fewest_workers_within_the_tolerance_of_the_bound_in_the_range_given():
    def line(n: int) -> float:
        return min(100.0 * n, 1000.0)

    assert knee(line, 1000.0, 0.05, 1, 32) == 10  # 950 is 5% short: 10 workers reach the bound
    assert knee(line, 1000.0, 0.15, 1, 32) == 9  # 900 is within 15%
    assert knee(line, 1000.0, 0.05, 12, 32) == 12  # never below `first` (run starts at the corner)
    assert knee(line, 1000.0, 0.05, 1, 10) == 10  # `last` is a count it may name
    assert knee(line, 1000.0, 0.05, 1, 8) is None  # none up to `last`: the caller decides (tune: the limit)


@pytest.mark.parametrize(("cpu", "main"), [(0.3, 0.02), (0.2, 0.01)])
def test_run_advises_the_knee_tune_measures_first_from_the_same_evidence(cpu, main):
    """Workers asleep most of each batch, the cores the bound under the cap: run's advised count is tune's knee."""
    measured, timing, share, trial = _as_run_and_as_trial(cpu, 0.0, main)
    alone = {"status": "ok", "stage": "workers", "num_workers": 0, "samples_per_s": 1.0}
    plan = plan_workers(1, timing, measured, 2, None, share)
    step = next_step([alone, trial], 2, WORKER_CAP, KNEE_SHORT)
    assert plan.limit == "cores" and step.reason.startswith("the model's knee")
    assert plan.workers == step.num_workers, (plan.limits, step.reason)


def test_the_main_process_s_hand_over_bounds_the_rate_beyond_its_cpu():
    # asleep workers (2 ms a sample, 0.1 ms of CPU), the main process on a CPU 0.35 ms a sample but taking 1.1 ms
    # of its one thread's wall time to take each sample in: the hand-over, not the CPU, is the bound
    args = (32, 0.0021, 0.0001, 0.00035, 2, 2.0)
    bounds = rate_bounds(32, 0.0021, 0.0001, 0.00035, 2.0, handover_s=0.0011)
    assert limit_of(bounds) == "handover" and bounds["handover"] == pytest.approx(1 / 0.0011)
    assert predicted_rate(*args, handover_s=0.0011) == pytest.approx(1 / 0.0011)
    # not timed (run's advice, a tune of an older run): the CPU bounds as before
    assert "handover" not in rate_bounds(32, 0.0021, 0.0001, 0.00035, 2.0)
    assert predicted_rate(*args) > 2 / 0.0011


def test_run_and_tune_predict_the_same_rate_with_the_hand_over_timed():
    # asleep workers, a main process on a CPU 20% of the time but taking 30 ms of each 80 ms batch to take it in
    r = _starved(1, 0.05, 0.0, 0.2, handover_s=0.03)
    measured, timing = loader_cpu(r, r.loaders[0]), loop_timing(r.loaders[0])
    assert measured is not None and timing is not None and timing.handover_s == pytest.approx(0.03)
    share = main_cpu_share(r, r.loaders[0])
    trial = {"status": "ok", "stage": "workers", "num_workers": 1, "samples_per_s": BATCH / WAIT_S,
             "worker_cpu_share": measured.cpu_share, "worker_runq_share": measured.runq_share,
             "worker_busy_share": measured.busy_share, "main_cpu_share": share,
             "main_handover_share": 0.03 / WAIT_S}  # fmt: skip
    model = fit([trial], cores=2)
    assert model is not None and model.limit(32) == "handover"
    plan = plan_workers(1, timing, measured, 2, None, share)
    # 1.25 x 33 batches/s x 80 ms a batch of one worker; the main process's CPU alone said 7
    assert plan.limit == "handover" and plan.workers == 4 and plan.limits["main"] == 7
    for n in (2, 4, 8):
        ran = plan_workers(1, timing, measured, 2, n, share)
        if ran.workers == n:
            assert BATCH * ran.batches_per_s == pytest.approx(model.rate(n), rel=0.02), (n, model.bounds(n))
    [finding] = find_input_bound(r)
    assert finding.evidence["model_limit"] == "handover" and finding.evidence["handover_ms_per_batch"] == 30.0


def test_cpu_bound_workers_hand_over_is_left_to_their_own_rate():
    # workers on a CPU 95%: the main process waits for each worker's GIL while it computes, not a bound of its own
    r = _starved(1, 0.95, 0.0, 0.05, handover_s=0.07)
    measured, timing = loader_cpu(r, r.loaders[0]), loop_timing(r.loaders[0])
    assert measured is not None and timing is not None and timing.handover_s == pytest.approx(0.07)
    plan = plan_workers(1, timing, measured, 2, None, main_cpu_share(r, r.loaders[0]))
    assert "handover" not in plan.limits and plan.limit == "cores"
