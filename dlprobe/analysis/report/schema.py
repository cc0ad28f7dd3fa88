"""The shape of report.json, as rundir/schema.py is for the run directory: TypedDicts that report/build.py builds,
and the JSON Schema generated from them (report.schema.json, shipped in the package for the people who read the report
in their CI). `python -m dlprobe.analysis.report.schema` writes the file again after a change here; a test checks that
the shipped file is the generated one.

One meaning per key: "ranks" is a list of rank labels or entries wherever it appears; counts are `*_count`."""

# No `from __future__ import annotations` here: a TypedDict's string annotations are each compiled into a ForwardRef
# when the class is made, which made importing this module about 10 ms more of CPU in every process that imports it.
import json
import types
import typing
from pathlib import Path
from typing import Any, TypedDict, Union

from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE, Evidence
from dlprobe.rundir.schema import Machine, ShmRemoved, SupervisorCost

# 2: job.ranks (a count) became job.rank_count; read_problems and output_problems added; loaders' num_workers is
# null where the loader's settings could not be read.
# 3: one meaning per evidence key, and each code's evidence in the schema: rank-failed's "rank" is the rank's label as
# in every other finding (torchrun's record, its rank a number, moved under "launcher"); attached-workers-gone's
# kernel lines are "kernel_log_lines" ("kernel_log" is one line in worker-killed); a probe-degraded finding of the
# supervisor has "pids": [] and "process": "supervisor" (pids are numbers).
SCHEMA_VERSION = 4
SCHEMA_FILE = Path(__file__).with_name("report.schema.json")


class MetricSummary(TypedDict):
    """A process's memory metric over the run, in bytes; null where it was never read."""

    start: int | None
    peak: int | None
    end: int | None


class WaitSummary(TypedDict):
    epochs: int
    batches: int
    wait_s: float  # time the loop waited for batches, starting the iterator included
    wait_fraction: float | None  # share of the loop's time spent waiting
    first_batch_s: float | None
    median_wait_s: float | None
    p95_wait_s: float | None
    max_wait_s: float | None


class WorkerRef(TypedDict):
    worker_id: int | None
    pid: int


class WorkerTime(TypedDict):
    """The loader's workers' time while the loop ran: on a CPU, queued for one, asleep."""

    cpu_share: float
    runq_share: float | None
    wait_share: float
    wall_s: float


class ThreadRef(TypedDict):
    worker_id: int
    tid: int  # the worker thread's native id (/proc/PID/task/TID of the training process)


class _LoaderEntry(WaitSummary):
    loader_id: int
    dataset_type: str | None
    dataset_len: int | None
    iterable: bool | None
    batch_size: int | None
    num_workers: int | None  # null: the loader's settings could not be read (a probe-degraded finding says why)
    start_method: str | None
    pin_memory: bool | None
    prefetch_factor: int | None
    persistent_workers: bool | None
    timeout: float | None
    batch_bytes: int | None
    batch_leaves: list[dict[str, Any]] | None
    dataset_est_bytes: int | None
    suspects: list[dict[str, Any]]  # dataset attributes holding many Python objects (copy-on-access suspects)
    workers: list[WorkerRef]
    errors: list[dict[str, Any]]  # exceptions the loader raised: type, message, cause, epoch, t
    worker_batches: list[list[int] | None]  # per epoch, the batches each worker delivered; null: not recorded
    worker_time: WorkerTime | None  # null: the workers' CPU time was not read


class LoaderEntry(_LoaderEntry, total=False):
    # "thread" where the workers were threads of the training process; else torch's setting, null where torch has none
    worker_method: str | None
    worker_threads: list[ThreadRef]  # the worker threads each epoch started (empty for worker processes)
    # one line: the start method in use and what forkserver, spawn or fork would change (absent: not read)
    start_readiness: str | None
    rank: str  # in a job: the rank whose loader this is ("rank 1", "node 0 rank 1")
    pid: int  # in a job: that rank's process


class _ProcessEntry(TypedDict):
    pid: int
    role: str  # main | worker | other | dlprobe-check (a copy dlprobe forked for its own checks)
    loader_id: int | None
    worker_id: int | None
    comm: str | None
    samples: int
    rss: MetricSummary
    uss: MetricSummary
    pss: MetricSummary
    swap: MetricSummary
    anon: MetricSummary
    private_dirty: MetricSummary
    private_clean: MetricSummary
    pss_anon: MetricSummary
    pss_file: MetricSummary
    pss_shmem: MetricSummary


class _UssStep(TypedDict):
    t: float  # seconds since the run started, at the reading after the rise
    batch: int | None  # the loader's batches so far in its epoch then (null: none reported yet)
    bytes: int


class UssStep(_UssStep, total=False):
    """A one-time rise of a worker's USS between two consecutive readings (loader_model.worker_memory.find_steps)."""

    cause: str  # "full garbage collection": the worker's full collection ran inside it (timed); absent: not known
    held_at_start: bool  # true: read before the steady part began, so in held_at_start_bytes, not in steady_bytes


class _WorkerGrowth(TypedDict):
    growth_bytes: int  # peak less the first reading, steps included
    held_at_start_bytes: int  # what it had grown by its first reading after its first batch
    steady_bytes: int  # its growth from then on, less its steps
    steady_peak_bytes: int  # its peak less its steps
    steps: list[UssStep]
    batches: int | None  # the loader's batches so far in its epoch at the worker's last reading
    steady_per_batch_bytes: int | None
    projected_epoch_end_bytes: int | None  # `run`'s projection of its growth to the epoch's end (cow-growth's model)


class WorkerGrowth(_WorkerGrowth, total=False):
    """A worker's USS growth, its one-time steps apart: what `dlprobe check` compares with a baseline."""

    # full collections that began before its first reading: their copy is in that reading, some or all of it, of a
    # size no rise shows whole (the check takes it out as the largest copy read elsewhere)
    collected_before_first_reading: int


class ProcessEntry(_ProcessEntry, total=False):
    growth: WorkerGrowth | None  # workers only (absent in reports of dlprobe before it; null: USS never read)
    rank: str | None  # in a job: the rank the process belongs to; null for the launcher and the rest of the tree
    memory_unread: str  # why its smaps_rollup could not be read (USS, PSS and page kinds are null: not read)
    # A worker's readings from its parent's death on (seconds into the run; how many) are teardown, left out of its
    # summaries and of every memory finding (analysis/run/teardown.py)
    teardown_from_s: float
    teardown_readings: int


class _FindingEntry(TypedDict):
    code: str  # stable, kebab-case (the table of codes in docs/findings.md)
    severity: str  # error | warning | info
    title: str
    detail: str
    fix: str
    evidence: Evidence  # the numbers behind it, per code (EVIDENCE_BY_CODE); in a job "ranks" lists each rank's own
    loader_id: int | None


class FindingEntry(_FindingEntry, total=False):
    explained_by: str | None  # the code of the finding that explains this one (listed before it); null: none does
    severity_reason: str | None  # why the severity is not the analyzer's own (a cause raised to what it explains)


class Verdict(TypedDict):
    """The one cause that explains the most of what went wrong (report/verdict.py): the report opens with it."""

    code: str  # the cause's finding code
    severity: str
    loader_id: int | None
    sentence: str  # the cause's title with its numbers, and what it explains
    fix: str  # the change to make
    explains: list[str]  # the codes of the findings it explains, in the report's order


class _SystemEntry(TypedDict):
    shm_total: int | None
    shm_peak: int | None  # the machine's /dev/shm use at its peak (other jobs' files count)
    available_min: int | None
    cgroup_limit: int | None
    cgroup_peak: int | None
    pss_total_peak: int | None


class SystemEntry(_SystemEntry, total=False):
    shm_job_peak: int | None  # the /dev/shm pages the job's own processes mapped at the most (Pss_Shmem summed)
    # the job's anonymous memory (Pss_Anon summed, as pss_total_peak): without the libraries' and files' pages, whose
    # PSS moves with how many other processes on the machine map the same files (libtorch: 29 MiB between two runs)
    pss_anon_total_peak: int | None
    # the same with the workers' one-time steps apart, sum by sum (worker_steps.job_steady_peak): the check's total
    pss_anon_total_steady_peak: int | None


class ReadProblem(TypedDict):
    """A file of the run directory that could not be read in full (missing, cut short, records of the wrong type)."""

    file: str
    problem: str


class OutputProblem(TypedDict):
    """An output that could not be written (report.html, memory.png, the terminal summary)."""

    output: str
    problem: str


class RankEntry(TypedDict):
    label: str
    pid: int
    rank: int | None
    local_rank: int | None
    world_size: int | None
    node_rank: int | None
    host: str | None
    run_dir: str
    loaders: int
    workers: int
    num_workers: int
    batches: int
    wait_fraction: float | None
    uss_peak: int | None
    workers_uss_peak: int | None
    pss_peak: int | None


class PssTotal(TypedDict):
    t: list[float]
    bytes: list[int]


class NodeEntry(TypedDict):
    node: int
    node_rank: int | None
    host: str | None
    run_dir: str
    exit_code: int | None
    ranks: list[str]
    worker_processes: int
    pss_peak: int | None
    pss_end: int | None
    uss_peak: int | None
    memory_limit: int | None
    memory_limit_kind: str | None
    pss_projected_epoch_end: int | None
    worker_projected_peak: int | None
    workers_per_rank_fit: int | None
    pss_total: PssTotal


class AttachedEntry(TypedDict):
    """`dlprobe attach`: the run is a window on a job dlprobe did not start (no exit code, no hooks)."""

    pid: int | None
    root_pid: int | None
    job_ended: bool | None
    interrupted: bool | None


class JobEntry(TypedDict):
    rank_count: int
    run_dirs: list[str]
    nodes: list[NodeEntry]


class _Report(TypedDict):
    schema_version: int
    dlprobe_version: str
    run_dir: str
    script: str | None
    argv: list[str]
    exit_code: int | None
    signal: str | None
    duration_s: float | None
    machine: Machine
    loaders: list[LoaderEntry]
    processes: list[ProcessEntry]
    system: SystemEntry
    findings: list[FindingEntry]  # ordered by cause: the verdict's first, each cause before what it explains
    probe_cost: SupervisorCost | None
    shm_removed: list[ShmRemoved]
    orphans_stopped: list[int]  # the same, stopped because dlprobe ended the run (--on-hang stop, tune's trials)
    orphans_left: list[int]  # DataLoader workers still running 6 s after their main process, left running
    read_problems: list[ReadProblem]
    attached: AttachedEntry | None


class Report(_Report, total=False):
    # always written since it was added (not required, so reports of an older dlprobe still fit this schema)
    verdict: Verdict | None  # null: no warning or error was found
    output_problems: list[OutputProblem]
    ranks: list[RankEntry]  # a job's report only
    job: JobEntry  # a job's report only


_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string", type(None): "null"}


def _schema_of(annotation: Any, defs: dict[str, Any], hints_of: Any) -> dict[str, Any]:
    if annotation is Any:
        return {}
    if annotation is None:
        return {"type": "null"}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    origin = typing.get_origin(annotation)
    if origin in (Union, types.UnionType):
        arms = [_schema_of(arm, defs, hints_of) for arm in typing.get_args(annotation)]
        if all(set(arm) == {"type"} for arm in arms):
            return {"type": [arm["type"] for arm in arms]}
        return {"anyOf": arms}
    if origin is list:
        return {"type": "array", "items": _schema_of(typing.get_args(annotation)[0], defs, hints_of)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema_of(typing.get_args(annotation)[1], defs, hints_of)}
    if typing.is_typeddict(annotation):
        name = annotation.__name__
        if name not in defs:
            defs[name] = {}  # placeholder: a type that contains itself refers to its own definition
            hints = hints_of(annotation)
            entry: dict[str, Any] = {
                "type": "object",
                "properties": {key: _schema_of(hint, defs, hints_of) for key, hint in hints.items()},
                "required": sorted(annotation.__required_keys__),
            }
            if annotation.__doc__ and not annotation.__doc__.startswith(f"{name}("):
                entry["description"] = " ".join(annotation.__doc__.split())
            defs[name] = entry
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema for {annotation!r}")


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of report.json. Objects allow more keys than they name: a newer dlprobe may
    add some without raising schema_version, which it raises when a key changes meaning or goes away."""
    from dlprobe.analysis.evidence import schema as evidence_schema
    from dlprobe.rundir import schema as rundir_schema

    namespace = {**vars(rundir_schema), **vars(evidence_schema), **globals()}

    def hints_of(record_type: type) -> dict[str, Any]:
        return typing.get_type_hints(record_type, namespace)

    defs: dict[str, Any] = {}
    root = _schema_of(Report, defs, hints_of)
    # Each code's evidence: the finding's schema says which keys its code gives, with their types (`Evidence`, every
    # code's keys at once, is what mypy reads the report through; the schema checks each finding by its own code).
    defs.pop("Evidence")
    defs["FindingEntry"]["properties"]["evidence"] = {"type": "object"}
    defs["FindingEntry"]["allOf"] = [
        {
            "if": {"properties": {"code": {"const": code}}},
            "then": {"properties": {"evidence": _schema_of(evidence, defs, hints_of)}},
        }
        for code, evidence in sorted(EVIDENCE_BY_CODE.items())
    ]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://dlprobe.dev/report.schema.v{SCHEMA_VERSION}.json",
        "title": "dlprobe report.json",
        "description": f"schema_version {SCHEMA_VERSION}; generated from dlprobe/analysis/report/schema.py",
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


if __name__ == "__main__":
    SCHEMA_FILE.write_text(schema_text())
    print(f"wrote {SCHEMA_FILE}")
