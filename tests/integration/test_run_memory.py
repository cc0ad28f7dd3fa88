"""`dlprobe run` on real DataLoaders with real workers: copy-on-access growth, start methods, /dev/shm."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import SCRIPTS, memory_cgroup, needs_small_shm, run_with_small_shm, wait_for_plot

MiB = 1024 * 1024


def test_leaky_list_dataset_reports_cow_growth_naming_the_attribute(leaky_list_run):
    result = leaky_list_run
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    evidence = finding["evidence"]
    assert evidence["suspects"][0]["attribute"] == "self.records"
    assert evidence["suspects"][0]["type"] == "list[dict]"
    assert evidence["suspects"][0]["items"] == 600_000
    assert all(w["uss_growth_bytes"] >= 64 * MiB for w in evidence["workers"])
    # the signature of copy-on-access: private memory grows, RSS barely moves
    assert all(w["rss_growth_bytes"] < w["uss_growth_bytes"] / 2 for w in evidence["workers"])
    assert "self.records" in finding["fix"]
    # by kind of page: Private_Dirty rose while Anonymous stayed flat, which is copy-on-write
    assert all(w["cow_bytes"] >= 64 * MiB > w["anon_growth_bytes"] for w in evidence["workers"])
    assert "copy-on-write" in finding["title"]
    # The workers' memory as the epoch's last batch arrived (read by the main process just before torch shuts them
    # down) is in each worker's series: the end of the growth is never lost to the sampler's rounds.
    [last] = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()
              if '"workers_last"' in line]  # fmt: skip
    at_end = {w["pid"]: w["memory"]["uss"] for w in last["workers"]}
    peaks = {w["pid"]: w["uss_peak_bytes"] for w in evidence["workers"]}
    assert set(at_end) == set(peaks) and all(peaks[pid] >= uss for pid, uss in at_end.items())
    assert wait_for_plot(result.run_dir).stat().st_size > 10_000


def test_numpy_dataset_has_no_cow_growth(probe):
    result = probe("numpy_dataset.py")
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    report = result.report
    [loader] = report["loaders"]
    assert loader["num_workers"] == 2 and loader["start_method"] == "fork"
    assert loader["batches"] == 600 and loader["suspects"] == []
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert len(workers) == 2
    assert all(w["uss"]["peak"] - w["uss"]["start"] < 64 * MiB for w in workers)


def test_spawn_loader_is_seen_with_its_workers_and_reports_the_copy(probe):
    result = probe("start_method_loader.py", "spawn", "96")
    assert result.returncode == 0, result.stderr
    report = result.report
    [loader] = report["loaders"]
    assert loader["start_method"] == "spawn"
    assert sorted(w["worker_id"] for w in loader["workers"]) == [0, 1]
    worker_pids = {w["pid"] for w in loader["workers"]}
    sampled = {p["pid"] for p in report["processes"] if p["role"] == "worker" and p["samples"] > 0}
    assert worker_pids == sampled
    [finding] = result.findings("spawn-copy")
    assert finding["evidence"]["dataset_est_bytes"] >= 96 * MiB
    assert finding["evidence"]["total_copied_bytes"] == 2 * finding["evidence"]["dataset_est_bytes"]


def test_forkserver_workers_are_found_as_grandchildren(probe):
    result = probe("start_method_loader.py", "forkserver", "8")
    assert result.returncode == 0, result.stderr
    report = result.report
    main_pid = next(p["pid"] for p in report["processes"] if p["role"] == "main")
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert len(workers) == 2 and all(w["samples"] > 0 for w in workers)
    assert report["loaders"][0]["start_method"] == "forkserver"
    assert result.findings("spawn-copy") == []  # 8 MiB is below the threshold
    assert main_pid not in {w["pid"] for w in workers}


@needs_small_shm
def test_small_dev_shm_gets_shm_pressure(tmp_path):
    run_dir = tmp_path / "run"
    command = f"{sys.executable} -m dlprobe run --quiet --out {run_dir} {SCRIPTS / 'big_batches.py'}"
    proc = run_with_small_shm("64M", command)
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads((run_dir / "report.json").read_text())
    [finding] = [f for f in report["findings"] if f["code"] == "shm-pressure"]
    evidence = finding["evidence"]
    assert evidence["shm_total_bytes"] == 64 * MiB
    batch_bytes = 16 * 3 * 256 * 256 * 4
    assert evidence["loaders"][0]["batch_bytes"] == batch_bytes
    assert evidence["in_flight_estimate_bytes"] == 2 * 2 * batch_bytes


def _workers(report):
    return [p for p in report["processes"] if p["role"] == "worker"]


def test_memory_mapped_npy_on_disk_is_file_pages_not_cow_growth(probe, tmp_path):
    result = probe("mmap_npy_dataset.py", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    workers = _workers(result.report)
    assert len(workers) == 2
    # the split by kind of page is in report.json: the array's pages are file-backed, not anonymous
    assert all(w["pss_file"]["peak"] >= 20 * MiB for w in workers)  # torch's own libraries map ~6 MiB
    assert all(w["anon"]["peak"] - w["anon"]["start"] < 16 * MiB for w in workers)
    assert "cow-growth" not in result.stderr


def test_memory_mapped_npy_in_dev_shm_is_shmem_pages_not_cow_growth(probe):
    result = probe("mmap_npy_dataset.py", "/dev/shm")
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    workers = _workers(result.report)
    assert len(workers) == 2
    assert all(w["pss_shmem"]["peak"] >= 20 * MiB for w in workers)  # batches in flight take < 2 MiB
    assert all(w["private_dirty"]["peak"] is not None for w in workers)


def test_growing_cache_in_workers_is_reported_as_new_allocations(probe):
    result = probe("growing_cache_dataset.py")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    assert "keep allocating" in finding["title"] and "Anonymous rose" in finding["title"]
    for w in finding["evidence"]["workers"]:
        assert w["anon_growth_bytes"] >= 64 * MiB
        assert w["cow_bytes"] < w["anon_growth_bytes"] / 2
    assert "keep allocating" in result.stderr


def test_the_workers_are_read_as_each_epochs_last_batch_arrives(probe):
    result = probe("three_epochs_small.py", options=["--quiet"])
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    last = [e for e in events if e["ev"] == "workers_last"]
    epochs = [e for e in events if e["ev"] == "epoch"]
    assert [e["epoch"] for e in last] == [0, 1, 2]
    for read, started in zip(last, epochs, strict=True):  # the same, fresh workers of each epoch, each read
        assert [w["pid"] for w in read["workers"]] == [w["pid"] for w in started["workers"]]
        assert all(w["memory"]["uss"] > 0 for w in read["workers"])


def test_a_first_scripts_list_of_dicts_gets_cow_growth_first_by_what_the_copies_cost(probe):
    # 1,000,000 dicts, each worker reading one field: ~55 MiB copied per worker, under any fixed 64 MiB per worker
    result = probe("list_of_dicts_first_script.py")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    evidence = finding["evidence"]
    assert evidence["variant"] == "copied" and evidence["counted_workers"] == 4
    assert evidence["total_bytes"] >= evidence["parent_bytes"] / 4  # the copies hold a quarter of the parent again
    assert evidence["suspects"][0]["attribute"] == "self.records" and "PackedRecords(self.records)" in finding["fix"]
    assert "in all" in finding["title"] and "of the parent's" in finding["title"]
    # the cause leads the report: before too-many-workers, input-bound and worker-hotspots
    assert result.report["findings"][0]["code"] == "cow-growth"
    assert result.findings("too-many-workers") == []  # 4 workers on a CPU a few % each: not what costs the user


def test_the_same_data_in_numpy_arrays_has_no_cow_growth(probe):
    result = probe("list_of_dicts_first_script.py", "1000000", "numpy")
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    assert result.report["loaders"][0]["suspects"] == []


def test_coco_style_annotations_get_packed_mapping_and_numpy_for_the_ids_as_paste_able_code(probe):
    result = probe("list_of_dicts_first_script.py", "600000", "dict")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    suspects = {s["attribute"]: s["type"] for s in finding["evidence"]["suspects"]}
    assert suspects == {"self.annotations": "dict[list]", "self.ids": "list[int]"}
    assert "`self.annotations = PackedMapping(self.annotations)`; `self.ids = np.asarray(self.ids)`" in finding["fix"]
    assert "from dlprobe.fixes import PackedMapping; import numpy as np" in finding["fix"]


def test_a_table_each_worker_loads_at_start_under_a_memory_limit_is_not_projected_as_growth(tmp_path):
    """Each of 2 workers fills a 350 MiB table in worker_init_fn, then stays flat; the loop stops 50 batches into an
    epoch of 625, in a 1.8 GiB memory cgroup. The load at start is each worker's base: extended over the epoch as if
    it were growth it projected 4.6 GiB a worker, "only 0 fit", and an error telling the user to drop the workers."""
    run_dir = tmp_path / "run"
    with memory_cgroup(1800 * MiB) as group:
        command = (
            f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m dlprobe run --quiet --out {run_dir} "
            f"{SCRIPTS / 'workers_load_table_at_start.py'} 350"
        )
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    codes = {f["code"]: f for f in report["findings"]}
    assert "too-many-workers" not in codes, codes["too-many-workers"]["title"]
    [cow] = [f for f in report["findings"] if f["code"] == "cow-growth"]
    assert "loaded its own copy of the same data at start" in cow["title"]
    for finding in report["findings"]:  # the 2 workers that ran fit; the projection says so wherever it is given
        fit = finding["evidence"].get("workers_that_fit_memory")
        assert fit is None or 2 <= fit <= 4, (finding["code"], fit)  # 4 x 400 MiB and the parent pass 1.8 GiB
        assert "only 0 fit" not in finding["fix"] and "only 1 fit" not in finding["fix"]
    # The reserve per worker is the one measured here: what the cgroup charged per worker beyond its USS (page
    # tables, kernel stacks: a few MiB, not the flat 10% of 1.4 GiB), read with the cgroup's page cache.
    [advice] = [f for f in report["findings"] if f["code"] == "input-bound"]
    assert advice["evidence"]["memory_reserve"] == "measured", advice["evidence"]
    uncounted = advice["evidence"]["uncounted_per_worker_bytes"]
    assert uncounted is not None and uncounted < 64 * MiB, advice["evidence"]


def test_pandas_object_columns_are_the_named_suspect_with_the_column_remedy(probe):
    result = probe("pandas_object_columns.py")
    assert result.returncode == 0, result.stderr
    [finding] = result.findings("cow-growth")
    [suspect] = finding["evidence"]["suspects"]
    assert suspect["attribute"] == "self.frame" and suspect["type"] == "pandas.DataFrame"
    assert {c["name"] for c in suspect["columns"] if c["python_objects"]} == {"path", "caption"}
    assert finding["fix"].startswith("`self.frame` is a pandas.DataFrame with 200,000 items")
    assert """self.frame['caption'] = self.frame['caption'].astype("string[pyarrow]")""" in finding["fix"]
    assert "`label` (int64) holds no Python objects and is safe" in finding["fix"]


def test_pandas_arrow_string_columns_are_no_suspect_and_copy_nothing(probe):
    fixed = probe("pandas_object_columns.py", "fixed")
    assert fixed.returncode == 0, fixed.stderr
    assert fixed.findings("cow-growth") == [] and fixed.report["loaders"][0]["suspects"] == []
