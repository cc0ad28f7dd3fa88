"""A job's report from synthetic multi-rank runs: the split by writer, merged findings, and the findings that only
exist across ranks (node-oversubscribed, uneven-ranks, rank-duplicates, a hang that stalls every rank, rank-failed)."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis import analyze
from dlprobe.analysis.findings.memory import COW_LOADED_AT_START
from dlprobe.analysis.job.findings import analyze_job, ranks_text
from dlprobe.analysis.job.model import is_job, split_job
from dlprobe.analysis.report.build import build_job_report
from dlprobe.analysis.run.stderr_log import LAUNCHER_SUMMARY_BYTES, launcher_failures, read_launcher_failures
from dlprobe.render.terminal import run_summary
from tests.unit import fakes
from tests.unit.test_failure_findings import hang_record, idle_worker, stuck_worker
from tests.unit.test_stack_causes import native, py

MiB = fakes.MiB
FLAT = [300 * MiB] * 3
LEAKY = [300 * MiB, 500 * MiB, 700 * MiB]


def two_ranks(uss0: list[int] = FLAT, uss1: list[int] = FLAT, cores: int = 8, **kw: Any):
    events = fakes.rank_events(10, 0, [11, 12], **kw.pop("r0", {})) + fakes.rank_events(
        20, 1, [21, 22], **kw.pop("r1", {})
    )
    processes = fakes.rank_processes(10, [11, 12], uss0) + fakes.rank_processes(20, [21, 22], uss1)
    return fakes.job_run(events, processes, usable_cores=cores, **kw)


def codes(findings) -> list[str]:
    return [f.code for f in findings]


def test_each_writer_becomes_a_rank_with_its_own_loader_and_workers():
    job = split_job([two_ranks()])
    assert [(v.rank, v.pid) for v in job.ranks] == [(0, 10), (1, 20)]
    for view, workers in zip(job.ranks, ([11, 12], [21, 22]), strict=True):
        assert [lo.loader_id for lo in view.run.loaders] == [0]
        assert sorted(p.pid for p in view.run.workers(0)) == workers
        assert [p.pid for p in view.run.processes if p.role == "main"] == [view.pid]
        assert view.run.loaders[0].epochs[0].batches == 10
    assert job.nodes[0].workers == 4
    assert job.nodes[0].projected_bytes is None  # every epoch ended: nothing to project
    # The node's total is every process of the tree in one sampling round: launcher + 2 ranks + 4 workers.
    assert job.nodes[0].pss_peak == 50 * MiB + 2 * 200 * MiB + 4 * 300 * MiB


def test_one_writer_is_not_a_job():
    run = fakes.job_run(fakes.rank_events(10, None, [11], world_size=None), fakes.rank_processes(10, [11], FLAT))
    assert not is_job([run])
    # one rank of two left events (the other died before its loader): still a job, so its failure is reported
    run = fakes.job_run(fakes.rank_events(10, 0, [11]), fakes.rank_processes(10, [11], FLAT))
    assert is_job([run])
    assert is_job([two_ranks()])


def test_cow_growth_on_both_ranks_is_one_finding_with_the_node_total():
    findings = analyze_job(split_job([two_ranks(LEAKY, LEAKY)]))
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert cow.title.startswith("Loader 0 on ranks 0-1: every worker copied up to 400.0 MiB")
    assert "node total 3.2 GiB of 24.0 GiB" in cow.title
    assert [r["rank"] for r in cow.evidence["ranks"]] == ["rank 0", "rank 1"]
    assert {r["pid"] for r in cow.evidence["ranks"]} == {10, 20}


def test_flat_workers_give_no_cow_growth():
    assert "cow-growth" not in codes(analyze_job(split_job([two_ranks(FLAT, FLAT)])))


def test_a_finding_on_one_rank_only_is_labelled_with_that_rank():
    findings = analyze_job(split_job([two_ranks(FLAT, LEAKY)]))
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert cow.title.startswith("Rank 1: 2 of 2 workers of loader 0")
    assert cow.evidence["rank"] == "rank 1" and "ranks" not in cow.evidence


def test_merged_cow_growth_is_an_error_when_the_node_sum_passes_half_the_memory():
    small = 2 * 1024 * MiB  # 4 workers x 700 MiB = 2.7 GiB > half of 2 GiB; each rank alone: 1.4 GiB
    findings = analyze_job(split_job([two_ranks(LEAKY, LEAKY, mem_total=small)]))
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert cow.severity == "error"


def test_ranks_times_workers_over_the_cores():
    [finding] = [f for f in analyze_job(split_job([two_ranks(cores=2)])) if f.code == "node-oversubscribed"]
    assert finding.title.startswith("2 ranks x 2 workers = 4 worker processes: ")
    assert "compete for 2 usable core(s)" in finding.title and finding.title.endswith("1 per rank fit")
    assert "node-oversubscribed" not in codes(analyze_job(split_job([two_ranks(cores=8)])))


def test_ranks_times_workers_over_the_memory():
    job = split_job([two_ranks(LEAKY, LEAKY, mem_total=3 * 1024 * MiB)])
    [finding] = [f for f in analyze_job(job) if f.code == "node-oversubscribed"]
    assert finding.severity == "error"
    assert finding.evidence["workers_per_rank_fit_memory"] == 1  # (0.8 x 3 GiB - 2 x 200 MiB) / (2 x 700 MiB)


def test_a_rank_with_no_batches_is_named_with_the_counts():
    job = split_job([two_ranks(r1={"batches": 0})])
    [finding] = [f for f in analyze_job(job) if f.code == "uneven-ranks"]
    assert finding.severity == "error"
    assert (
        finding.title
        == "Loader 0 gives rank 1 no batches in an epoch while the others get theirs (rank 0: 10, rank 1: 0)"
    )
    assert finding.evidence["short_ranks"] == {"rank 1": 0}


def test_a_rank_with_far_fewer_batches():
    [finding] = [f for f in analyze_job(split_job([two_ranks(r1={"batches": 4})])) if f.code == "uneven-ranks"]
    assert finding.severity == "warning"
    assert finding.title == "Loader 0 gives rank 1 far fewer batches per epoch than the others (rank 0: 10, rank 1: 4)"


def test_uneven_ranks_needs_far_fewer_batches_in_an_ended_epoch():
    assert "uneven-ranks" not in codes(analyze_job(split_job([two_ranks(r1={"batches": 9})])))
    # cut off (no epoch_end): another rank's crash, not a short shard
    assert "uneven-ranks" not in codes(analyze_job(split_job([two_ranks(r1={"batches": 0, "ended": False})])))


def test_ranks_reading_the_same_samples():
    same = [f"{i:016x}" for i in range(40)]
    job = split_job([two_ranks(r0={"digests": same}, r1={"digests": same})])
    [finding] = [f for f in analyze_job(job) if f.code == "rank-duplicates"]
    assert finding.title.startswith("Loader 0 feeds the same samples to ranks 0-1: up to 100%")
    look_alike = fakes.rank_events(20, 1, [21, 22], digests=same)
    next(e for e in look_alike if e["ev"] == "dupes")["unique"] = 10  # 80 samples, 10 distinct contents
    run = fakes.job_run(fakes.rank_events(10, 0, [11, 12], digests=same) + look_alike, [])
    assert "rank-duplicates" not in codes(analyze_job(split_job([run])))
    disjoint = [f"{i:016x}" for i in range(40, 80)]
    job = split_job([two_ranks(r0={"digests": same}, r1={"digests": disjoint})])
    assert "rank-duplicates" not in codes(analyze_job(job))


def _in_all_reduce() -> dict[str, Any]:
    frames = [
        py("all_reduce", "work.wait()", user=False),
        py("<module>", "dist.all_reduce(t)"),
    ]
    frames[0]["file"] = "/venv/torch/distributed/distributed_c10d.py"
    return {"pid": 10, "role": "other", "state": "S", "stack": [{"name": "MainThread", "frames": frames}]}


def _hung_job(other_rank_stack: dict[str, Any]):
    run = two_ranks()
    main = {"pid": 20, "role": "main", "state": "S",
            "stack": [{"name": "MainThread", "frames": [py("<module>", "for batch in loader:")]}]}  # fmt: skip
    worker = {**stuck_worker(), "pid": 21}
    worker["inflight"] = {**worker["inflight"], "pid": 21}
    record = hang_record([main, worker, idle_worker(22, 1), other_rank_stack])
    record["main_pid"] = 20
    run.hangs = [record]
    return split_job([run])


def test_one_ranks_stuck_worker_with_the_other_in_a_collective_is_one_hang():
    findings = analyze_job(_hung_job(_in_all_reduce()))
    [hang] = [f for f in findings if f.code in ("worker-hang", "main-hang")]
    assert hang.title.startswith("Rank 1: Loader 0 worker 0 (pid 21) hangs on index 13")
    assert hang.title.endswith("; rank 0 waits for it in all_reduce")
    assert hang.evidence["waiting_ranks"][0]["collective"].startswith("all_reduce (distributed_c10d.py")


def test_a_hang_without_a_collective_on_the_other_rank_says_no_wait():
    other = {**_in_all_reduce(), "stack": [{"name": "MainThread", "frames": [native("poll"), py("train_step")]}]}
    [hang] = [f for f in analyze_job(_hung_job(other)) if f.code == "worker-hang"]
    assert "for it" not in hang.title
    assert hang.evidence["waiting_ranks"] == [{"rank": "rank 0", "pid": 10, "collective": None, "stack_seen": True}]


NO_TRACEBACK = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"


def _failure(rank: int, local_rank: int, exitcode: str, traceback: str = NO_TRACEBACK) -> str:
    """One failed process in torchrun's summary, as torch 2.13 prints it (the exit code's trailing spaces included)."""
    return (
        f"  time      : 2026-11-23_13:17:51\n  host      : node-a\n"
        f"  rank      : {rank} (local_rank: {local_rank})\n"
        f"  exitcode  : {exitcode}\n  error_file: <N/A>\n  traceback : {traceback}\n"
    )


def _child_failed(other: str, root: str) -> str:
    """torchrun's ChildFailedError summary: the other failures, then the root cause (the first observed)."""
    rule = "-" * 60
    return (
        f"\ntorch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n{'=' * 60}\ntrain.py FAILED\n"
        f"{rule}\nFailures:\n[1]:\n{other}{rule}\nRoot Cause (first observed failure):\n[0]:\n{root}{'=' * 60}\n"
    )


CHILD_FAILED = _child_failed(_failure(0, 0, "-15 (pid: 10)  (SIGTERM)", "Signal 15 (SIGTERM) received by PID 10"),
                             _failure(1, 1, "1 (pid: 20) "))  # fmt: skip


def test_torchruns_failure_summary_is_read():
    stopped, failure = launcher_failures(CHILD_FAILED)  # as torch 2.13 prints it (a trailing space, two spaces)
    assert (stopped["rank"], stopped["exit_code"], stopped["signal"], stopped["root_cause"]) == (
        0,
        -15,
        "SIGTERM",
        False,
    )
    assert failure == {"rank": 1, "local_rank": 1, "host": "node-a", "exit_code": 1, "pid": 20, "signal": None,
                       "error_file": "<N/A>", "root_cause": True}  # fmt: skip
    assert launcher_failures("Traceback ...\nValueError: x\n") == []


def test_torchruns_summary_is_read_from_the_end_of_a_long_log(tmp_path):
    # torchrun prints its summary last: a log of many MiB is read from its end only (LAUNCHER_SUMMARY_BYTES)
    filler = ("step 1 loss 0.5\n" * 200_000)[: 3 * LAUNCHER_SUMMARY_BYTES]
    (tmp_path / "stderr.log").write_text(filler + CHILD_FAILED)
    assert [f["rank"] for f in read_launcher_failures(tmp_path)] == [0, 1]
    (tmp_path / "stderr.log").write_text(CHILD_FAILED + filler)  # a summary followed by more than the bound: not read
    assert read_launcher_failures(tmp_path) == []


def test_a_failed_rank_with_nothing_else_to_explain_it(tmp_path):
    (tmp_path / "stderr.log").write_text(CHILD_FAILED)
    run = two_ranks(path=str(tmp_path))
    run.launcher_failures = read_launcher_failures(tmp_path)  # as load_run reads it
    findings = analyze_job(split_job([run]))
    [failed] = [f for f in findings if f.code == "rank-failed"]
    assert failed.title == "Rank 1 (pid 20) failed first, with exit code 1 (torchrun's root cause)"
    assert [f["rank"] for f in failed.evidence["other_failures"]] == [0]  # stopped by torchrun: no finding of its own


def test_torchruns_failure_next_to_a_count_of_ranks_and_a_list_of_ranks(tmp_path):
    # The OOM job of issue 21: node-oversubscribed (an error, its rank count) and a merged cow-growth (a list of
    # ranks) both present when torchrun's summary is matched against the findings' ranks.
    (tmp_path / "stderr.log").write_text(CHILD_FAILED)
    run = two_ranks(LEAKY, LEAKY, mem_total=3 * 1024 * MiB, path=str(tmp_path))
    run.launcher_failures = read_launcher_failures(tmp_path)  # as load_run reads it
    findings = analyze_job(split_job([run]))
    [over] = [f for f in findings if f.code == "node-oversubscribed"]
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert over.severity == "error" and over.evidence["rank_count"] == 2 and "ranks" not in over.evidence
    assert [r["rank"] for r in cow.evidence["ranks"]] == ["rank 0", "rank 1"]
    assert cow.evidence["launcher"]["rank"] == 1  # the merged finding names rank 1: torchrun's failure explained
    assert [f for f in findings if f.code == "rank-failed"] == []


def test_a_rank_that_raised_before_its_loader_is_named_by_its_rank_and_explains_torchruns_summary(tmp_path):
    # The rank's own excepthook recorded the error with its rank; torchrun's summary names the same rank and pid.
    (tmp_path / "stderr.log").write_text(CHILD_FAILED.replace("1 (local_rank: 1)", "2 (local_rank: 0)").replace(
        "pid: 20", "pid: 30"))  # fmt: skip
    run = two_ranks(path=str(tmp_path))
    run.launcher_failures = read_launcher_failures(tmp_path)  # as load_run reads it
    run.events.append({"ev": "script_error", "t": 101.0, "pid": 30, "type": "RuntimeError", "message": "no data",
                       "file": "train.py", "line": 3, "rank": 2, "node_rank": 0})  # fmt: skip
    findings = analyze_job(split_job([run]))
    [error] = [f for f in findings if f.code == "script-error"]
    assert error.title == "Rank 2 (pid 30): The script raised RuntimeError: no data"
    assert error.evidence["launcher"]["rank"] == 2 and error.evidence["launcher"]["exit_code"] == 1
    assert [f for f in findings if f.code == "rank-failed"] == []  # explained by the rank's own error


def test_a_rank_that_raised_after_another_did_is_its_consequence():
    run = two_ranks()
    run.meta["started_at"] = 100.0
    run.events += [
        {"ev": "script_error", "t": 104.0, "pid": 20, "type": "ValueError", "message": "bad shard"},
        {"ev": "script_error", "t": 104.6, "pid": 10, "type": "RuntimeError", "message": "Connection closed by peer"},
    ]
    findings = analyze_job(split_job([run]))
    first, later = sorted((f for f in findings if f.code == "script-error"), key=lambda f: f.evidence["raised_at_s"])
    assert first.severity == "error" and first.title == "Rank 1: The script raised ValueError: bad shard"
    assert later.severity == "warning" and later.evidence["after_rank"] == "rank 1"
    assert later.title == (
        "Rank 0, 0.6 s after rank 1 failed (most likely because of it): The script raised RuntimeError: "
        "Connection closed by peer"
    )
    # the same error on both ranks is one failure of both, not a cause and its consequence
    run.events[-1] = {**run.events[-2], "pid": 10, "t": 104.6}
    [both] = [f for f in analyze_job(split_job([run])) if f.code == "script-error"]
    assert both.severity == "error" and both.title.startswith("On ranks 0-1: The script raised ValueError")


def test_a_process_that_never_became_a_rank_is_no_rank_another_ranks_error_follows():
    # pid 30 raised first and never wrote a rank: its error is named by its pid, with no `rank` (a label or none),
    # and rank 1's own error is no consequence of "None failed" (schema 3 wrote rank null and read it as a rank)
    run = two_ranks()
    run.meta["started_at"] = 100.0
    run.events += [
        {"ev": "script_error", "t": 103.0, "pid": 30, "type": "OSError", "message": "disk gone"},
        {"ev": "script_error", "t": 104.0, "pid": 20, "type": "ValueError", "message": "bad shard"},
    ]
    errors = [f for f in analyze_job(split_job([run])) if f.code == "script-error"]
    [lone] = [f for f in errors if f.title.startswith("Process 30: ")]
    [rank1] = [f for f in errors if "bad shard" in f.title]
    assert "rank" not in lone.evidence, lone.evidence
    assert rank1.severity == "error" and "after_rank" not in rank1.evidence, rank1.title


# torchrun's tie: rank 1 raised first, rank 0 failed on the collective it left, in the same second
TIED = _child_failed(_failure(1, 1, "1 (pid: 20) "), _failure(0, 0, "1 (pid: 10) "))


def test_torchruns_root_cause_in_the_same_second_does_not_overrule_the_rank_that_raised_first(tmp_path):
    # torchrun stamps a failure without an error file in whole seconds and names the smallest rank of a tie: rank 0,
    # whose "Connection closed by peer" came 0.4 s after rank 1's own error, read as its root cause. Each rank's own
    # error keeps its own record of torchrun's, and no "failed first" is said of the rank that raised second.
    (tmp_path / "stderr.log").write_text(TIED)
    run = two_ranks(path=str(tmp_path))
    run.meta["started_at"] = 100.0
    run.launcher_failures = read_launcher_failures(tmp_path)
    assert [(f["rank"], f["root_cause"]) for f in run.launcher_failures] == [(1, False), (0, True)]
    run.events += [
        {"ev": "script_error", "t": 104.0, "pid": 20, "type": "ValueError", "message": "bad shard"},
        {"ev": "script_error", "t": 104.4, "pid": 10, "type": "RuntimeError", "message": "Connection closed by peer"},
    ]
    findings = analyze_job(split_job([run]))
    first, later = sorted((f for f in findings if f.code == "script-error"), key=lambda f: f.evidence["raised_at_s"])
    assert first.severity == "error" and first.evidence["launcher"]["rank"] == 1
    assert later.severity == "warning" and later.evidence["launcher"]["rank"] == 0
    assert [f.title for f in findings if f.code == "rank-failed"] == []


def test_ranks_text():
    assert ranks_text(["rank 0", "rank 1", "rank 2", "rank 5"]) == "ranks 0-2, 5"
    assert ranks_text(["rank 3"]) == "rank 3"
    assert ranks_text(["node 0 rank 0", "node 1 rank 1"]) == "node 0 rank 0, node 1 rank 1"


def test_two_nodes_merge_into_one_job_with_node_labels():
    node0 = fakes.job_run(fakes.rank_events(10, 0, [11, 12]), fakes.rank_processes(10, [11, 12], LEAKY),
                          node_rank=0)  # fmt: skip
    node1 = fakes.job_run(fakes.rank_events(10, 1, [11, 12], node_rank=1, host="node-b"),
                          fakes.rank_processes(10, [11, 12], LEAKY), node_rank=1)  # fmt: skip
    job = split_job([node0, node1])
    assert [job.label(v) for v in job.ranks] == ["node 0 rank 0", "node 1 rank 1"]
    findings = analyze_job(job)
    [cow] = [f for f in findings if f.code == "cow-growth"]
    assert "node 0 total" in cow.title and "node 1 total" in cow.title
    report = build_job_report(job, findings)
    assert [r["label"] for r in report["ranks"]] == ["node 0 rank 0", "node 1 rank 1"]
    assert [n["host"] for n in report["job"]["nodes"]] == ["node-a", "node-b"]


def test_job_report_and_its_terminal_table():
    job = split_job([two_ranks(LEAKY, LEAKY)])
    report = build_job_report(job, analyze_job(job))
    assert [(r["label"], r["workers"], r["batches"]) for r in report["ranks"]] == [("rank 0", 2, 10), ("rank 1", 2, 10)]
    assert {lo["rank"] for lo in report["loaders"]} == {"rank 0", "rank 1"}
    node = report["job"]["nodes"][0]
    assert node["pss_peak"] == 50 * MiB + 2 * 200 * MiB + 4 * 700 * MiB
    from rich.console import Console

    console = Console(width=120, color_system=None, record=True)
    console.print(run_summary(report, verbose=True))  # the per-rank lines are evidence: under --verbose
    text = console.export_text()
    assert "Ranks" in text and "rank 1" in text
    assert "Node total PSS peak 3.2 GiB of 24.0 GiB (MemTotal), 4 worker processes" in text
    assert "rank 0 (pid 10): " in text  # the merged finding's per-rank lines


def test_the_sketch_keeps_the_same_smallest_digests_on_ranks_that_read_the_same_samples():
    import numpy as np

    from dlprobe.in_training.sample_hashes import SKETCH_SIZE, DuplicateCounter

    def sketch(rows: range, order: int = 1) -> set[str]:
        counter = DuplicateCounter(sketch=True)
        data = np.arange(1000, dtype=np.int64).reshape(-1, 2)
        picked = list(rows)[::order]
        for start in range(0, len(picked), 10):
            counter.add_batch(data[picked[start : start + 10]])
        return set(counter.summary()["digests"])

    same = sketch(range(0, 400))
    assert len(same) == SKETCH_SIZE
    assert sketch(range(0, 400), order=-1) == same  # the same samples in another order
    assert not sketch(range(0, 200)) & sketch(range(200, 400))  # DistributedSampler's disjoint halves
    assert "digests" not in DuplicateCounter().summary()


def test_the_sketch_of_a_map_style_loader_is_computed_per_batch_and_agrees_across_ranks():
    # A DDP rank's map-style loader is hashed for the sketch only, in numpy per batch (about 20x cheaper than blake2b
    # per sample); the same samples must give the same sketch in any order, batching or container.
    import numpy as np
    import torch

    from dlprobe.in_training.sample_hashes import SKETCH_ROW_BYTES, SKETCH_SIZE, DuplicateCounter

    images = np.random.default_rng(0).standard_normal((600, 3, 8, 8)).astype(np.float32)
    labels = np.arange(600) % 10

    def sketch(rows: list[int], batch: int = 16, as_tensor: bool = False) -> dict:
        counter = DuplicateCounter(sketch=True, row_bytes=SKETCH_ROW_BYTES, per_batch=True)
        for start in range(0, len(rows), batch):
            pick = rows[start : start + batch]
            x, y = images[pick], labels[pick]
            counter.add_batch((torch.from_numpy(x), torch.from_numpy(y)) if as_tensor else (x, y))
        return counter.summary()

    everything = sketch(list(range(600)))
    assert len(everything["digests"]) == SKETCH_SIZE
    assert (everything["samples"], everything["unique"], everything["duplicates"]) == (600, 600, 0)
    shuffled = list(np.random.default_rng(1).permutation(600))
    assert sketch(shuffled, batch=7, as_tensor=True)["digests"] == everything["digests"]
    twice = sketch(list(range(600)) * 2)
    assert twice["digests"] == everything["digests"]  # a sample read twice enters the sketch once
    assert (twice["unique"], twice["duplicates"], twice["first_duplicate_at"]) == (600, 600, 600)
    assert not set(sketch(list(range(0, 600, 2)))["digests"]) & set(sketch(list(range(1, 600, 2)))["digests"])


def test_the_process_groups_own_threads_are_no_fork_hazard():
    from dlprobe.analysis.findings.startup import find_fork_hazard

    def fork_state(names: dict[str, int]) -> dict[str, Any]:
        return {"ev": "fork_state", "t": 101.0, "pid": 10, "loader": 0, "epoch": 0, "python_threads": [],
                "os_threads": sum(names.values()), "os_thread_names": names, "torch_threads": 1, "openmp": True,
                "cuda_initialized": False, "baseline": {"os_threads": 1, "python_threads": 0}}  # fmt: skip

    gloo = {"python3": 1, "gloo_tcp_loop": 1, "pt_gloo_runloop": 2}
    run = fakes.run([fakes.loader()], [], events=[fork_state(gloo)])
    assert find_fork_hazard(run) == []
    run = fakes.run([fakes.loader()], [], events=[fork_state({**gloo, "python3": 2})])
    [finding] = find_fork_hazard(run)
    assert "1 native thread(s) started since import" in finding.title


def test_a_running_epoch_projects_the_node_total_to_its_end_with_runs_own_per_worker_figure():
    # 5 of 10 batches (160 samples / 2 ranks / batch 8) and each worker grew 400 MiB so far. The node's total and the
    # workers that fit use the figure run's advice, tune and attach use (worker_growth.worker_projection, bent toward
    # its ceiling), not a straight line of their own (which said 400 MiB more each, whatever the ceiling).
    from dlprobe.analysis.measures.stats import metric_summary
    from dlprobe.analysis.measures.worker_growth import worker_projection
    from dlprobe.loader_model.memory_growth import worker_end_bytes

    half = {"ended": False, "batches": 5}
    job = split_job([two_ranks(LEAKY, LEAKY, r0=half, r1=half)])
    memory = job.nodes[0]
    ends = []
    for view in job.ranks:
        for proc in view.run.workers(0):
            uss = metric_summary(proc.series, "uss")
            model = worker_projection(view.run, view.run.loaders[0], proc)
            ends.append((worker_end_bytes(uss["start"] or 0, uss["peak"] or 0, model), uss["peak"] or 0))
    assert len(ends) == 4 and all(end > peak for end, peak in ends)  # growth still to come in a running epoch
    assert memory.projected_bytes == memory.pss_peak + sum(end - peak for end, peak in ends)
    assert memory.worker_peak_bytes == max(end for end, _ in ends)
    ended = split_job([two_ranks(LEAKY, LEAKY)]).nodes[0]  # every epoch ended: its peaks, nothing projected
    assert ended.projected_bytes is None and ended.worker_peak_bytes == 700 * MiB


def test_a_rank_that_died_before_its_loader_keeps_its_script_error():
    run = two_ranks()
    run.events.append({"ev": "script_error", "t": 101.0, "pid": 30, "type": "RuntimeError", "message": "no data",
                       "file": "train.py", "line": 3})  # fmt: skip
    findings = analyze_job(split_job([run]))
    [error] = [f for f in findings if f.code == "script-error"]
    assert error.title == "Process 30: The script raised RuntimeError: no data"
    assert error.evidence["pid"] == 30


def test_the_node_total_holds_each_processs_last_reading_between_its_readings():
    from dlprobe.analysis.measures.stats import job_pss_peak, tree_total
    from dlprobe.analysis.run.model import ProcessRecord, Series

    def proc(pid: int, readings: list[tuple[float, int]]) -> ProcessRecord:
        t, v = [t for t, _ in readings], [v for _, v in readings]
        return ProcessRecord(pid, "other", series=Series(t=t, rss=list(v), uss=list(v), pss=list(v), swap=[0] * len(t)))

    # PSS read in turns: a at 0 and 2, b at 1 and 3, c (a worker that ended) only at 1
    a, b, c = proc(1, [(0.0, 10), (2.0, 12)]), proc(2, [(1.0, 100), (3.0, 300)]), proc(3, [(1.0, 5)])
    assert tree_total([a, b, c], "pss") == ([0.0, 1.0, 2.0, 3.0], [10, 10 + 100 + 5, 12 + 100, 300])
    # report.json's pss_total_peak (and check's max_total_pss) read the same total: the sum of one round's readings
    # alone would give 105 here (b and c read at 1, a and d not), not the 165 the node held then
    # (all four started together and were read in turns)
    b, c, d = (
        proc(2, [(0.0, 90), (1.0, 100), (3.0, 30)]),
        proc(3, [(0.0, 5), (1.0, 5)]),
        proc(4, [(0.0, 50), (1.5, 50)]),
    )
    assert job_pss_peak([a, b, c, d]) == 10 + 100 + 5 + 50


def test_the_jobs_pss_peak_leaves_out_a_sum_with_a_parents_reading_from_before_its_fork():
    # The fixed demo's job read 214.8 MiB in one run and 289.6 MiB in the next (check's baseline total_pss failed on
    # the script that wrote it): the parent read at 200 MiB before it forked a copy of itself that shares half of its
    # pages, summed with the copy's 100 MiB read after the fork. Once the parent is read again the sum is the job's.
    from dlprobe.analysis.measures.stats import job_pss_peak
    from dlprobe.analysis.run.model import ProcessRecord, Series

    def proc(pid: int, readings: list[tuple[float, int]], ppid: int | None = None) -> ProcessRecord:
        t, v = [t for t, _ in readings], [v for _, v in readings]
        return ProcessRecord(pid, "other", ppid=ppid,
                             series=Series(t=t, rss=list(v), uss=list(v), pss=list(v), swap=[0] * len(t)))  # fmt: skip

    parent = proc(1, [(0.0, 200), (3.0, 110)])
    copy = proc(2, [(1.0, 100), (2.0, 100), (3.0, 100), (4.0, 100)], ppid=1)
    assert job_pss_peak([parent, copy]) == 210  # not 300, the sum at 1.0 and 2.0
    # Only a parent's stale reading: a still process of the tree (a resource tracker) read at 0 and 20 s beside
    # workers the parent, read every 0.5 s, restarts every 2 s leaves every sum with a fresh parent reading in.
    main = proc(1, [(i * 0.5, 100) for i in range(41)])
    tracker = proc(5, [(0.0, 10), (20.0, 10)], ppid=1)
    workers = [proc(100 + i, [(2.0 * (i // 2) + 0.75, 150), (2.0 * (i // 2) + 1.75, 160)], ppid=1) for i in range(20)]
    assert job_pss_peak([main, tracker, *workers]) == 100 + 10 + 2 * 160


def test_a_rank_that_began_its_own_program_sums_with_its_agents_older_reading():
    # A clean-clone CI run's node total (378 MiB) came out below one rank's own peak (559 MiB): torchrun's agent,
    # read before it started the ranks and not again until the end, left out every sum that held the ranks. A rank
    # is an exec'd program that shares no heap with the agent; its forked workers still share its own.
    from dlprobe.analysis.measures.stats import job_pss_peak
    from dlprobe.analysis.run.model import ProcessRecord, Series

    def proc(pid: int, readings: list[tuple[float, int]], ppid: int | None = None, own: bool = False) -> ProcessRecord:
        t, v = [t for t, _ in readings], [v for _, v in readings]
        return ProcessRecord(pid, "other", ppid=ppid, own_program=own,
                             series=Series(t=t, rss=list(v), uss=list(v), pss=list(v), swap=[0] * len(t)))  # fmt: skip

    agent = proc(1, [(0.0, 50), (10.0, 50)])
    rank = proc(2, [(1.0, 300), (4.0, 150), (9.0, 150)], ppid=1, own=True)
    workers = [proc(10 + i, [(3.0, 150), (5.0, 200), (9.0, 250)], ppid=2) for i in range(2)]
    # at 3.0 the rank's 300 from before its fork is stale: left out; from 4.0 the sums count
    assert job_pss_peak([agent, rank, *workers]) == 50 + 150 + 2 * 250
    # were the rank a fork of the agent, every sum that held it would hold a stale reading of the agent: only the
    # agent alone is left
    assert job_pss_peak([agent, proc(2, rank.series.values("pss"), ppid=1), *workers]) == 50


def test_a_finding_from_the_jobs_own_files_is_said_once_without_ranks():
    from dlprobe.analysis.run.stackfile import StackProfile

    run = two_ranks()
    run.stacks = StackProfile(status="failed", error="Permission denied (os error 13)")  # the run's one py-spy
    [note] = [f for f in analyze_job(split_job([run])) if f.code == "probe-degraded"]
    assert note.title.startswith("Hotspot sampling failed") and "ranks" not in note.evidence


def test_the_pages_timeline_of_a_job_draws_the_ranks_by_name_not_the_launcher():
    from dlprobe.analysis.report.timeline import timeline_from_run

    run = two_ranks(LEAKY, LEAKY)
    job = split_job([run])
    timeline = timeline_from_run(run, build_job_report(job, analyze_job(job)))
    names = [p["name"] for p in timeline["processes"]]
    assert "rank 0 main (10)" in names and "rank 1 L0 worker 1 (22)" in names
    assert not any("(1)" in name for name in names)  # the launcher (pid 1) is no rank
    assert {p["role"] for p in timeline["processes"]} == {"main", "worker"}


def test_workers_loading_their_own_copy_on_every_rank_are_said_so_merged():
    from dlprobe.analysis.evidence.finding import Finding
    from dlprobe.analysis.job.findings import merge_rank_findings

    job = split_job([two_ranks()])
    title = (
        "Each of the 2 workers of loader 0 loaded its own copy of the same data at start: up to 96.0 MiB of new "
        "anonymous memory each, then flat"
    )

    def finding(rank_pid: int) -> Finding:
        rows = [
            {"pid": rank_pid + i, "cow_bytes": 0, "anon_growth_bytes": 96 * MiB, "loaded_at_start": True}
            for i in (1, 2)
        ]
        return Finding("cow-growth", "warning", title, "", "", {"workers": rows, "variant": COW_LOADED_AT_START}, 0)

    per_rank = [(view, [finding(view.pid)]) for view in job.ranks]
    [merged] = merge_rank_findings(job, per_rank)
    assert merged.title.startswith(
        "Loader 0 on ranks 0-1: every worker loaded its own copy of the same data at start, up to 96.0 MiB each"
    )


def test_cow_growth_is_judged_on_the_nodes_total_across_ranks():
    # each rank's 2 workers copy 20 MiB each of a list of records: 40 MiB, under a quarter of the rank's 200 MiB;
    # the node's 4 workers together copy 80 MiB
    copying = [300 * MiB, 310 * MiB, 320 * MiB]
    data = two_ranks(copying, copying)
    for ev in data.events:
        if ev["ev"] == "loader":
            ev["dataset"]["suspects"] = [{"attribute": "self.records", "type": "list[dict]", "items": 500_000,
                                          "objects": 1_500_001, "est_bytes": 120 * MiB}]  # fmt: skip
    alone = split_job([data])
    assert all(f.code != "cow-growth" for view in alone.ranks for f in analyze(view.run))
    [cow] = [f for f in analyze_job(alone) if f.code == "cow-growth"]
    assert cow.title.startswith("Loader 0 on ranks 0-1: every worker copied up to 20.0 MiB")
    assert [r["evidence"]["other_ranks_bytes"] for r in cow.evidence["ranks"]] == [40 * MiB, 40 * MiB]
    assert "80.0 MiB with the other ranks on this node" in cow.evidence["ranks"][0]["title"]


def _attr_events(pids: list[int], end: int) -> list[dict[str, Any]]:
    readings = ((101.5, "start", 0, 0), (105.5, "end", 5, end))
    return [{"ev": "worker_attrs", "t": t, "pid": pid, "loader": 0, "worker_id": i, "phase": phase, "batches": b,
             "attrs": {"self.cache": n}}
            for i, pid in enumerate(pids) for t, phase, b, n in readings]  # fmt: skip


def _allocating_ranks(events: list[dict[str, Any]]):
    """Two ranks whose workers' USS and RSS rise together (new allocations), and the given worker_attrs events."""
    base = fakes.rank_events(10, 0, [11, 12]) + fakes.rank_events(20, 1, [21, 22])
    processes = fakes.rank_processes(10, [11, 12], LEAKY) + fakes.rank_processes(20, [21, 22], LEAKY)
    for p in processes:
        if p.comm == "pt_data_worker":
            p.series.rss = [u + 100 * MiB for u in LEAKY]
    return fakes.job_run(base + events, processes)


def test_merged_allocation_names_the_attribute_every_ranks_workers_grew():
    events = _attr_events([11, 12], 40) + _attr_events([21, 22], 40)
    [cow] = [f for f in analyze_job(split_job([_allocating_ranks(events)])) if f.code == "cow-growth"]
    assert cow.evidence["variant"] == "allocating"
    assert cow.title.startswith("Loader 0 on ranks 0-1: every worker grew by up to 400.0 MiB of private memory each "
                                "(`self.cache` grows in them)")  # fmt: skip
    assert "`self.cache` grew from 0 to 40 items in each of the 2 workers" in cow.detail
    # one rank's workers grew no attribute: the merged title names none
    events = _attr_events([11, 12], 40) + _attr_events([21, 22], 0)
    [cow] = [f for f in analyze_job(split_job([_allocating_ranks(events)])) if f.code == "cow-growth"]
    assert "self.cache" not in cow.title
