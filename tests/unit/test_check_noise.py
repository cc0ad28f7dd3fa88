"""The check's noise model on made-up readings and reports: one-time steps, the spread, the baseline's rule, the
failure's explanation, the job's own /dev/shm and the command that makes a first baseline."""

from __future__ import annotations

from typing import Any

from dlprobe.check.config import config_from_mapping
from dlprobe.check.metrics import report_metrics, report_spreads
from dlprobe.check.rules import BASELINE_RULE, busy_words, evaluate
from dlprobe.commands.check import CheckOptions, first_baseline_command
from dlprobe.loader_model.worker_memory import FULL_COLLECTION, STEP_MIN_BYTES, find_steps, spread
from tests.unit.check_reports import MiB, finding, make_report

# tests/scripts/numpy_dataset.py as the sampler read one worker (seconds, MiB): a full collection at 2.8 s
HEALTHY = [(0.0, 9.9), (0.03, 10.7), (0.2, 13.3), (1.3, 13.6), (2.8, 48.2), (4.8, 48.2), (5.2, 48.2)]
# tests/scripts/leaky_list_dataset.py: copy-on-write of a list of dicts, rising over consecutive readings
LEAKY = [(0.0, 9.8), (0.1, 14.4), (0.3, 69.5), (3.3, 130.8), (5.1, 130.8)]


def mib(series: list[tuple[float, float]]) -> list[tuple[float, int]]:
    return [(t, int(v * MiB)) for t, v in series]


def test_a_jump_between_two_readings_that_does_not_go_on_is_a_step():
    [step] = find_steps(mib(HEALTHY), after=0.2)
    assert (step.t_before, step.t) == (1.3, 2.8)
    assert step.bytes == int(48.2 * MiB) - int(13.6 * MiB)


def test_growth_over_consecutive_readings_is_not_a_step():
    assert find_steps(mib(LEAKY), after=0.1) == []


def test_no_step_before_the_first_batch_or_below_the_minimum_and_one_at_the_last_reading():
    assert find_steps(mib(HEALTHY), after=2.8) == []  # a load at start is growth the worker holds
    # the run ended before the still worker was read again: the rise before it was small, so it is a step
    [last] = find_steps(mib(HEALTHY[:5]), after=0.2)
    assert last.t == 2.8
    # the start's fast allocations do not set the steady rate: the intervals after the first batch do
    early = [(0.0, 10.0), (0.1, 17.0), (0.2, 24.0), (0.3, 31.0), (2.3, 31.5), (4.3, 32.0), (6.3, 57.0), (8.3, 57.0)]
    assert [(s.t, s.bytes) for s in find_steps(mib(early), after=0.3)] == [(6.3, 25 * MiB)]
    small = [(t, v if v < 40 else 13.6 + (STEP_MIN_BYTES - 1) / MiB) for t, v in HEALTHY]
    assert find_steps(mib(small)) == []


# Real readings (benchmarks/check_noise.py, both cores busy): a reading taken during the collection splits its step
SPLIT = [(0.0, 9.7), (0.01, 9.8), (0.2, 13.0), (2.0, 13.2), (4.0, 21.7), (4.5, 48.1), (7.5, 48.2)]
# the leaky list read sparsely: its first big rise straight after the first batch (at 0.13 s), then on
LEAKY_SPARSE = [(0.0, 9.6), (0.12, 18.5), (0.15, 31.3), (0.66, 85.1), (1.66, 95.8), (2.66, 130.4), (4.66, 130.5)]


def test_a_step_split_by_a_reading_is_one_step():
    [step] = find_steps(mib(SPLIT), after=0.035)
    assert (step.t_before, step.t, step.bytes) == (2.0, 4.5, int(48.1 * MiB) - int(13.2 * MiB))


def test_a_rise_straight_after_the_first_batch_is_growth_not_a_step():
    assert find_steps(mib(LEAKY_SPARSE), after=0.1275) == []


def test_a_jump_the_steady_rate_explains_is_not_a_step():
    # 10 MiB a second, read every second, and one 12 MiB rise over a reading two seconds late: the rate, not a step
    steady = [(float(t), 10.0 * t) for t in range(6)] + [(8.0, 62.0), (9.0, 72.0), (10.0, 82.0)]
    assert find_steps(mib(steady)) == []
    # 1 MiB a second, then a still worker read again 20 s later, 20 MiB higher: the same rate, not a step
    slow = [(float(t), 10.0 + t) for t in range(6)] + [(25.0, 35.0), (26.0, 36.0)]
    assert find_steps(mib(slow)) == []


def test_spread_is_the_sample_standard_deviation():
    assert spread([1.0]) is None
    assert spread([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]) == 2.138089935299395


def with_growth(report: dict[str, Any], *growths: tuple[float, float, list[float]]) -> dict[str, Any]:
    """Each worker's (steady MiB, steady peak MiB, steps in MiB), as report.json's processes[].growth holds it."""
    for proc, (steady, peak, steps) in zip(report["processes"], growths, strict=True):
        proc["growth"] = {
            "growth_bytes": int((steady + sum(steps)) * MiB),
            "held_at_start_bytes": 0,
            "steady_bytes": int(steady * MiB),
            "steady_peak_bytes": int(peak * MiB),
            "steps": [{"t": 2.8, "batch": 197, "bytes": int(s * MiB)} for s in steps],
            "batches": 300,
            "steady_per_batch_bytes": int(steady * MiB / 300),
            "projected_epoch_end_bytes": None,
        }
    return report


def healthy(*steps: list[float]) -> dict[str, Any]:
    report = make_report(worker_uss=((10 * MiB, 14 * MiB + int(sum(steps[0]) * MiB)),
                                     (10 * MiB, 14 * MiB + int(sum(steps[1]) * MiB))))  # fmt: skip
    return with_growth(report, (4.0, 14.0, steps[0]), (4.2, 14.2, steps[1]))


def rows(report: dict[str, Any], baseline: dict[str, Any], **limits: Any) -> dict[str, Any]:
    config = config_from_mapping({"fail_on": [], **limits}, "ci.toml")
    return {r.rule: r for r in evaluate(config, report, baseline=baseline, baseline_path="base.json")}


def test_one_step_in_one_worker_is_not_a_regression_and_is_named():
    base = healthy([], [])
    stepped = healthy([35.0], [])
    assert report_metrics(stepped)["worker_uss_growth"] == 39 * MiB  # peak less start: the step counts there
    out = rows(stepped, base)
    growth = out["baseline worker_uss_growth"]
    assert growth.status == "pass", growth.message
    assert growth.observed == "4.2 MiB (steps apart: one-time step of 35.0 MiB in worker 0 at batch 197)"
    assert growth.threshold == "<= 12.2 MiB (4.2 MiB + max(10%, 4 spreads of 144.8 KiB, 8.0 MiB floor))"
    assert out["baseline worker_uss_peak"].status == "pass"
    assert out["baseline total_pss"].status == "pass"  # 500 MiB less the 35 MiB step against 500 MiB
    # without the steps apart (reports of an older dlprobe) the same numbers fail: what the issue saw
    old = {k: v for k, v in stepped.items()}
    old["processes"] = [{k: v for k, v in p.items() if k != "growth"} for p in stepped["processes"]]
    base_old = {**base, "processes": [{k: v for k, v in p.items() if k != "growth"} for p in base["processes"]]}
    assert rows(old, base_old)["baseline worker_uss_growth"].status == "fail"


def test_steady_growth_far_above_the_baseline_fails_with_its_size_spreads_and_rule():
    leaky = with_growth(make_report(worker_uss=((10 * MiB, 131 * MiB), (10 * MiB, 131 * MiB))),
                        (121.0, 131.0, []), (121.0, 131.0, []))  # fmt: skip
    leaky["findings"] = [finding("cow-growth", title="2 of 2 workers each copied up to 117.9 MiB")]
    leaky["findings"][0]["evidence"] = {"suspects": [{"attribute": "self.records", "type": "list[dict]",
                                                      "items": 600000}]}  # fmt: skip
    leaky["machine"] = {"load_avg_1m": 4.1, "usable_cores": 2}
    leaky["loaders"][0]["worker_time"] = {"cpu_share": 0.5, "runq_share": 0.27, "wait_share": 0.2, "wall_s": 9.0}
    row = rows(leaky, healthy([], []))["baseline worker_uss_growth"]
    assert row.status == "fail"
    assert row.message.startswith(
        "worker_uss_growth (worker_steady_growth, one-time steps apart) regressed: 121.0 MiB against 4.2 MiB in "
        "base.json (+116.8 MiB, 826 spreads above the baseline;"
    ), row.message
    assert row.message.endswith(f"rule: {BASELINE_RULE}")
    assert row.explanation == (
        "explained by cow-growth: 2 of 2 workers each copied up to 117.9 MiB (suspect: self.records, a list[dict] of "
        "600,000 items); the machine was busy: the workers waited for a core 27% of the time, load average 4.1 on 2 "
        "usable core(s) at the start"
    )


def test_a_metric_noisier_than_its_margin_is_gated_by_its_spread_and_says_so():
    noisy = with_growth(make_report(), (4.0, 14.0, []), (40.0, 50.0, []))
    assert report_spreads(noisy)["worker_steady_growth"] > 25 * MiB
    row = rows(healthy([], []), noisy)["baseline worker_uss_growth"]
    assert row.status == "pass" and "noisy: spread 25.5 MiB across the baseline's workers" in row.threshold
    far = with_growth(make_report(), (400.0, 410.0, []), (401.0, 411.0, []))  # far beyond 4 spreads: still fails
    assert rows(far, noisy)["baseline worker_uss_growth"].status == "fail"
    # a margin wider than the spread gates it again, at the margin
    wide = rows(healthy([], []), noisy, baseline_margins={"worker_uss_growth": "64 MiB"})["baseline worker_uss_growth"]
    assert wide.status == "pass" and "4 spreads of 25.5 MiB" in wide.threshold
    grown = with_growth(make_report(), (120.0, 130.0, []), (119.0, 129.0, []))  # 40 + 4 x 25.5 MiB allowed, not 40 + 64
    row = rows(grown, noisy, baseline_margins={"worker_uss_growth": "64 MiB"})["baseline worker_uss_growth"]
    assert row.status == "pass", row.threshold


def test_the_jobs_total_is_its_anonymous_memory_less_the_steps():
    report = healthy([35.0], [])
    report["system"]["pss_anon_total_peak"] = 300 * MiB  # the files' pages (500 MiB in all) left out
    assert report_metrics(report)["total_pss_steady"] == 265 * MiB
    assert report_metrics(report)["total_pss"] == 500 * MiB  # max_total_pss still limits all of it


def test_busy_words_say_not_busy_too():
    report = make_report()
    assert busy_words(report) == ""
    report["machine"] = {"load_avg_1m": 0.8, "usable_cores": 2}
    assert busy_words(report) == "the machine was not busy: load average 0.8 on 2 usable core(s) at the start"


def test_shm_peak_is_the_jobs_own_where_it_was_read():
    report = make_report(shm_peak=90 * MiB)
    assert report_metrics(report)["shm_peak"] == 90 * MiB  # an older report: the machine's
    report["system"]["shm_job_peak"] = 12 * MiB
    assert report_metrics(report)["shm_peak"] == 12 * MiB
    out = rows(report, report, max_shm_peak="64 MB")
    assert out["max_shm_peak"].status == "pass"


def test_the_missing_baseline_names_the_one_command_that_makes_it():
    options = CheckOptions("train.py", ["--epochs", "1"], "dlprobe.toml", {"max_batches": "100"})
    assert first_baseline_command(options) == (
        "dlprobe check --config dlprobe.toml --max-batches 100 --update-baseline train.py --epochs 1"
    )


def test_a_baseline_of_an_older_dlprobe_is_still_read_and_compared_as_before():
    old = make_report(worker_uss=((10 * MiB, 14 * MiB), (10 * MiB, 14 * MiB)))  # schema 1: no growth, no anon total
    out = rows(healthy([35.0], []), old)
    growth = out["baseline worker_uss_growth"]
    assert growth.status == "fail"  # peak less start on both sides: the step counts, as it did
    assert growth.threshold == "<= 12.0 MiB (4.0 MiB + 8.0 MiB noise floor)"
    assert growth.observed == "39.0 MiB"
    assert growth.explanation == "no finding explains it; one-time step of 35.0 MiB in worker 0 at batch 197"


# numpy_dataset.py on a busy machine, read sparsely: the collection right after the first batch (at 0.2 s)
EARLY_COLLECTION = [(0.0, 9.9), (0.2, 13.3), (1.2, 47.5), (2.2, 47.6), (3.2, 47.8), (4.2, 47.9)]


def test_a_rise_a_full_collection_ran_in_is_a_step_wherever_the_readings_put_it():
    # the readings alone read it as growth (no steady interval before it); the timed collection names it a step
    assert find_steps(mib(EARLY_COLLECTION), after=0.2) == []
    [step] = find_steps(mib(EARLY_COLLECTION), after=0.2, collections=[(0.5, 0.62)])
    assert step.cause == FULL_COLLECTION and (step.t_before, step.t) == (0.2, 1.2)
    assert step.bytes == int(47.5 * MiB) - int(13.3 * MiB)  # its whole rise, as the readings' own steps


def test_a_collection_that_spans_a_reading_makes_the_rises_around_it_one_step():
    [step] = find_steps(mib(SPLIT), after=0.035, collections=[(3.9, 4.2)])
    assert (step.t_before, step.t, step.cause) == (2.0, 4.5, FULL_COLLECTION)


def test_a_collection_inside_a_dataset_s_own_growth_is_no_step():
    # the leaky list goes on rising at its own rate through the collection: nothing above that rate to set apart
    assert find_steps(mib(LEAKY_SPARSE), after=0.1275, collections=[(1.0, 1.1)]) == []
    assert find_steps(mib(LEAKY), after=0.1, collections=[(0.2, 0.25)]) == []


def test_a_copy_read_before_the_steady_part_is_held_at_start_and_still_a_step():
    # the first batch ended inside the collection's interval: the steady part's first reading already holds the copy,
    # so it is not growth; it is still apart from the peak (a baseline whose copy came later is the same run)
    for after in (0.3, 1.2):
        [step] = find_steps(mib(EARLY_COLLECTION), after=after, collections=[(0.5, 0.62)])
        assert step.held and step.cause == FULL_COLLECTION and step.bytes > 30 * MiB
    [late] = find_steps(mib(EARLY_COLLECTION), after=0.2, collections=[(0.5, 0.62)])
    assert not late.held


# tests/scripts/gc_copy_loader.py 5 on a machine with one core busy, worker 1: the round stamped 1.568 s read the
# training process's large map first and this worker after its collection began at 1.576 s, a third into its copy
STAMPED_EARLY = [(1.392, 5.0), (1.413, 10.0), (1.568, 22.9), (2.069, 47.4), (7.077, 47.6), (11.154, 47.6)]


def test_a_reading_stamped_before_a_collection_but_read_inside_it_holds_part_of_the_copy():
    collection = [(1.576, 1.728)]
    [alone] = find_steps(mib(STAMPED_EARLY), after=1.446, collections=collection)
    assert (alone.t_before, alone.t) == (1.568, 2.069)  # by its stamp: 24.5 of the copy's 37 MiB
    [step] = find_steps(mib(STAMPED_EARLY), after=1.446, collections=collection, read_ends={1.568: 1.591})
    assert (step.t_before, step.t, step.cause) == (1.413, 2.069, FULL_COLLECTION) and step.held
    assert step.bytes == int(47.4 * MiB) - int(10.0 * MiB)
    # a read that ended before the collection began leaves the step where the stamps put it
    [before] = find_steps(mib(STAMPED_EARLY), after=1.446, collections=collection, read_ends={1.568: 1.571})
    assert before == alone


# benchmarks/check_noise.py --busy, the numpy loader's worker 0: readings 0.07 s apart straight after its start, the
# collection (3.06-3.27 s) spanning the reading at 3.19 s
BUSY_START = [(0.0, 10.1), (0.11, 11.3), (0.18, 13.7), (1.68, 14.0), (3.19, 48.2), (4.98, 48.2)]


def test_a_copy_s_steady_rate_is_not_the_start_s_allocations():
    # the 2.4 MiB the first batches took in 0.07 s is no steady rate: read as one, the copy would not be 4x of it
    [step] = find_steps(mib(BUSY_START), after=0.1, collections=[(3.06, 3.27)])
    assert (step.t_before, step.t) == (1.68, 4.98)
    assert step.bytes == int(48.2 * MiB) - int(14.0 * MiB)


def test_a_copy_before_the_first_reading_has_both_sides_peaks_compared_with_their_steps_in():
    # the baseline's workers copied 35 MiB at batch 197 (set apart: a 14 MiB steady peak); this run's collected before
    # the sampler's first reading: 49 MiB from the first reading on, a copy no reading shows
    base = healthy([35.0], [35.0])
    for proc in base["processes"]:
        proc["growth"]["steps"][0]["cause"] = FULL_COLLECTION
    early = with_growth(make_report(worker_uss=((45 * MiB, 49 * MiB), (45 * MiB, 49.2 * MiB))),
                        (4.0, 49.0, []), (4.2, 49.2, []))  # fmt: skip
    assert rows(early, base)["baseline worker_uss_peak"].status == "fail"  # what a busy runner's second run read
    for proc in early["processes"]:
        proc["growth"]["collected_before_first_reading"] = 1
    out = rows(early, base)
    peak = out["baseline worker_uss_peak"]
    assert peak.status == "pass", peak.threshold
    assert peak.observed == ("14.2 MiB (no step; worker 0's full collection ran before its first reading, its copy "
                             "taken as the largest step read (35.0 MiB))")  # fmt: skip
    assert out["baseline worker_uss_growth"].status == "pass"  # the growth is read after it: steps still apart
    # neither run read a step: the copy's size is unknown, and both sides' peaks are compared with it in
    unstepped = rows(early, with_growth(make_report(worker_uss=((45 * MiB, 49 * MiB), (45 * MiB, 49 * MiB))),
                                        (4.0, 49.0, []), (4.0, 49.0, [])))["baseline worker_uss_peak"]  # fmt: skip
    assert unstepped.status == "pass"
    assert unstepped.observed == "49.2 MiB (steps in: worker 0's full collection ran before its first reading)"
    # the first reading came mid-collection: 19 MiB of the copy was read as a step, the other 16 MiB is taken out
    partly = with_growth(make_report(worker_uss=((30 * MiB, 49 * MiB), (45 * MiB, 49.2 * MiB))),
                         (4.0, 30.0, [19.0]), (4.2, 49.2, []))  # fmt: skip
    for proc in partly["processes"]:
        proc["growth"]["collected_before_first_reading"] = 1
    peak = rows(partly, base)["baseline worker_uss_peak"]
    assert peak.status == "pass" and peak.observed.startswith("14.2 MiB"), peak.observed  # 49.2 - 35; 30 - 16
    # a regression is still one: 100 MiB more per worker than the baseline's peak with its step in
    grown = with_growth(make_report(worker_uss=((45 * MiB, 149 * MiB), (45 * MiB, 149 * MiB))),
                        (4.0, 149.0, []), (4.0, 149.0, []))  # fmt: skip
    grown["processes"][0]["growth"]["collected_before_first_reading"] = 1
    assert rows(grown, base)["baseline worker_uss_peak"].status == "fail"
