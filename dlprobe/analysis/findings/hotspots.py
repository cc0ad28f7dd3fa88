"""Where data-loading time goes: the workers' own clocks split it, py-spy samples name the functions inside."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.fetch_stacks import LINE_NUMBER, in_fetch, in_probe, library_time, rank
from dlprobe.analysis.measures.fetch_timing import FetchTiming, fetch_timing
from dlprobe.analysis.measures.loop_timing import loop_timing
from dlprobe.analysis.measures.worker_cpu import (
    HAND_OVER,
    INPUT_BOUND_SHARE,
    IO_BOUND,
    LoaderCpu,
    idle_worker_ids,
    loader_cpu,
)
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.analysis.run.stackfile import StackCount
from dlprobe.loader_model.limits import IO_BOUND_WAIT

MIN_SAMPLES = 10
TOP_FUNCTIONS = 6


def _loading_samples(run: RunData, loader: LoaderRecord) -> list[StackCount]:
    """Samples of this loader's workers; with num_workers=0, the main process's samples inside fetch()."""
    if run.stacks is None:
        return []
    # Only samples inside fetch(): a worker waiting for its next index, or the loop's own work, is not loading.
    workers: set[int | None] = {p.pid for p in run.workers(loader.loader_id)}
    pids = workers if loader.num_workers else {run.meta.get("target_pid")}
    return in_fetch(run.stacks.stacks, pids)


def _waits(timing: FetchTiming | None, cpu: LoaderCpu | None) -> bool:
    """Whether the workers' loading time is spent blocked (a read, a sleep, a lock), not computing or queued for a
    core: from their own clocks inside fetch and collate where they were read, else from /proc over their life."""
    if timing is not None:
        return timing.blocked_share >= IO_BOUND_WAIT
    return cpu is not None and cpu.bound == IO_BOUND


def find_worker_hotspots(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        timing = loop_timing(loader)
        if timing is None or timing.wait_share < INPUT_BOUND_SHARE:
            continue  # the loop is not waiting for data, so making loading faster would not speed it up
        loading = _loading_samples(run, loader)
        samples = [s for s in loading if not in_probe(s)]
        total = sum(s.count for s in samples)
        if total < MIN_SAMPLES:
            continue
        categories, functions, lines = rank(samples)
        shares: list[dict[str, Any]] = [
            {"category": c, "share": round(n / total, 3), "samples": n} for c, n in categories.most_common()
        ]
        top: list[dict[str, Any]] = [
            {"function": f, "share": round(n / total, 3), "samples": n} for f, n in functions.most_common(TOP_FUNCTIONS)
        ]
        top_name = str(top[0]["function"])
        hot_line = next((f for f, _ in lines.most_common() if LINE_NUMBER.sub(")", f) == top_name), top_name)
        main_cat = str(shares[0]["category"])
        fix = {
            "decode": "Decode faster (pillow-simd, torchvision.io.decode_jpeg, PIL's draft() for JPEG downscaling) or "
            "store pre-decoded/resized data (uint8 arrays, WebDataset shards at training resolution).",
            "file read": "Read less and from faster storage: copy the data to local disk, pack small files into "
            "shards (tar/WebDataset, LMDB), memory-map arrays instead of loading them per sample.",
            "transforms": "Make augmentations cheaper: crop/resize before other transforms, work on uint8, or run "
            "them batched on the GPU (torchvision.transforms.v2 on tensors, kornia).",
            "collate": "Collate less: return tensors (not lists of numbers) from __getitem__, avoid per-sample "
            "Python objects, or use a simpler collate_fn.",
            "send to main process": "Send less per batch: narrower dtypes (see dtype-waste), fewer/lighter fields.",
            # The function is named here, not pointed at: the evidence it would point to is folded away on the page.
            "dataset code": f"Speed up {top_name}: it is your dataset's own code and took "
            f"{100 * top[0]['share']:.0f}% of the loading samples (the next functions are in the evidence).",
        }[main_cat]
        inside = library_time(samples, total) if main_cat == "dataset code" else None
        if inside is not None:
            fix = _library_fix(inside)
        where = "workers" if loader.num_workers else "main process (num_workers=0) inside fetch()"
        rate = run.stacks.rate if run.stacks else "?"
        spread = ", ".join(f"{s['category']} {100 * s['share']:.0f}%" for s in shares[:3])
        title = f"Loader {loader.loader_id}'s data loading time goes to {spread}"
        detail = (
            f"{total:,} py-spy samples of the {where} at {rate} Hz while the loop waited for data "
            f"{100 * timing.wait_share:.0f}% of the time, so this is the work to make cheaper."
        )
        evidence: Evidence = {"samples": total, "categories": shares, "top_functions": top,
                                    "probe_samples": sum(s.count for s in loading) - total,
                                    "inside_library": inside}  # fmt: skip
        cpu = loader_cpu(run, loader, idle_worker_ids(loader))
        if cpu is not None:
            evidence.update(cpu.evidence())
        clocks = fetch_timing(run, loader) if loader.num_workers else None
        if clocks is not None:
            evidence["loading_time"] = clocks.evidence()
        if cpu is not None and cpu.bound == HAND_OVER:
            # The workers build each batch quickly and then wait for the next index: their profile says where the
            # loading time goes, but the loop is not waiting for that time.
            title = (
                f"Loader {loader.loader_id}'s workers are idle most of the time ({cpu.describe()}): of the time they "
                f"load, {spread}; top: {top_name} ({100 * top[0]['share']:.0f}%)"
            )
            detail = (
                f"{total:,} py-spy samples of the workers at {rate} Hz place their loading time; their own timing "
                f"says they built batches only {100 * (cpu.fetch_share or 0):.0f}% of the time, so the loop's wait "
                "is not in this code."
            )
            fix = (
                f"Faster code in {top_name} would barely help: the loop waits for batches to be handed over, "
                "not built (see input-bound)."
            )
        elif _waits(clocks, cpu):
            # py-spy samples blocked threads too (--idle), so a sleeping worker's profile puts all its time in the
            # function that waits; the clocks say that time is waiting, not work to optimise.
            if clocks is not None:
                title = (
                    f"Loader {loader.loader_id}'s workers mostly wait, they do not compute: blocked "
                    f"{100 * clocks.blocked_share:.0f}% of the time they build batches, on a CPU "
                    f"{100 * clocks.cpu_share:.0f}%; waiting in {hot_line}"
                )
                detail = (
                    f"The workers' own clocks over {clocks.batches:,} batches: {clocks.describe()}. Blocked time "
                    f"is a read, the network, a lock or a sleep, not computing. {total:,} py-spy samples at {rate} Hz "
                    f"(blocked ones included) place it: {top_name} {100 * top[0]['share']:.0f}%, at {hot_line} most."
                )
            elif cpu is not None:
                title = (
                    f"Loader {loader.loader_id}'s workers mostly wait, they do not compute ({cpu.describe()}): "
                    f"their time goes to {spread}; top: {top_name} ({100 * top[0]['share']:.0f}%)"
                )
                detail = (
                    f"{total:,} py-spy samples of the workers at {rate} Hz, blocked ones included, place the time; "
                    f"/proc/PID/stat says the workers were on a CPU only {100 * cpu.cpu_share:.0f}% of it, so the "
                    "time in these functions is spent waiting (a read, the network, a lock, a sleep), not computing."
                )
            fix = (
                f"Speeding up the Python code would barely help: {hot_line} waits. Overlap the "
                "waits with more workers (see input-bound for the number), read from faster or local storage, or "
                "read in larger chunks."
            )
        else:
            title += f"; top: {top_name} ({100 * top[0]['share']:.0f}%)"
            if inside is not None:
                title += f", {100 * inside['share']:.0f}% of all inside {inside['library']}"
            if clocks is not None:
                detail += f" The workers' own clocks over {clocks.batches:,} batches: {clocks.describe()}."
            elif cpu is not None:
                detail += f" The workers are {cpu.bound}: {cpu.describe()}."
        findings.append(
            Finding(
                code="worker-hotspots",
                severity="info",
                title=title,
                detail=detail,
                fix=fix,
                evidence=evidence,
                loader_id=loader.loader_id,
            )
        )
    return findings


def _library_fix(inside: dict[str, Any]) -> str:
    """The fix where the dataset's time is a library's: the user's call into it, per sample, is what to change."""
    library, share, caller = inside["library"], 100 * inside["share"], inside["called_from"]
    text = (
        f"{share:.0f}% of the loading samples are inside {library}, called from {caller}: the time is the library's "
        "work for each sample, not your code's own. "
    )
    if library == "pandas":
        return text + (
            "A DataFrame row per sample (`.iloc[i]`, `.loc`) builds a Series each time (tens of microseconds, where "
            "a numpy array's item takes a fraction of one): convert the columns the dataset reads to numpy arrays "
            "once in `__init__` (`self.x = df['x'].to_numpy()` for each column `__getitem__` reads) and index those."
        )
    return text + (
        f"Call {library} once per batch instead of once per sample (a `__getitems__` or a batch sampler), or "
        f"convert what the dataset reads from {library} to arrays or tensors once in `__init__`."
    )
