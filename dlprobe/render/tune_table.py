"""The terminal view of a tune result: one row per trial, the recommendation and why."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from dlprobe.rundir.handle import RunDir
from dlprobe.tune.records import TrialRow, TuneResult
from dlprobe.units import format_bytes


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def _predicted(trial: TrialRow) -> str:
    """The model's rate for the trial and its error against the measured one; 'fit' where the model was fitted."""
    predicted = trial.get("predicted_samples_per_s")
    if predicted is None:
        return "-"
    if trial.get("prediction_fitted"):
        return f"{predicted:,.0f} fit"
    error = trial.get("prediction_error")
    return f"{predicted:,.0f}" if error is None else f"{predicted:,.0f} {100 * error:+.0f}%"  # no rate, no error


def prediction_line(result: TuneResult) -> str | None:
    model = result.get("prediction")
    if not model:
        return None
    cpu, main = model.get("cpu_ms_per_sample"), model.get("main_cpu_ms_per_sample")
    left = model.get("cores_left")
    cores = (
        f", {cpu:.2f} ms of a worker's CPU"
        + (f" (read at num_workers={model['cpu_read_at_workers']})" if model.get("cpu_read_at_workers", 1) > 1 else "")
        + (f" and {main:.2f} ms of the main process's" if main else "")
        + f" per sample, so {left:g} of {model['usable_cores']} core(s)"
        + (" (the rest busy with other work)" if left is not None and left < model["usable_cores"] else "")
        + f" hold ~{model['cores_limit_workers']:g} workers"
        if cpu
        else ", CPU time not read (no cores cap)"
    )
    cap = model.get("measured_cap_samples_per_s")
    flat = f"; flat at {cap:,.0f} samples/s where trials fell below it" if cap else ""
    handover = model.get("handover_ms_per_sample")
    if handover:  # the main process's one thread taking batches in: at most 1 / this, whatever the workers
        flat = f"; the main process takes {handover:.2f} ms a sample to receive batches{flat}"
    error = model.get("median_error")
    checked = (
        f"median error {100 * error:.0f}% over {model['checked_trials']} trial(s), each predicted before it ran"
        if error is not None
        else "no other trial to check it on"
    )
    return (
        f"predicted: fitted on num_workers={', '.join(map(str, model['fitted_on']))}: one worker "
        f"{model['worker_samples_per_s']:,.0f} samples/s{cores}{flat}; {checked}"
    )


def trials_table(result: TuneResult) -> Table:
    table = Table(
        title="Trials: samples/s once the pipeline filled, and the model's prediction (error); per-worker USS peak "
        "(+ steady growth); /dev/shm in flight; "
        "projected memory for a full epoch",
        title_justify="left",
    )
    with_pin = any(t.get("pin_memory") for t in result["trials"])
    columns = ["workers", "prefetch", *(["pin"] if with_pin else []), "status", "samples/s", "predicted",
               "of best", "1st batch", "USS/worker", "shm", "epoch mem", "fits"]  # fmt: skip
    for col in columns:
        table.add_column(col, justify="left" if col in ("status", "pin") else "right", no_wrap=True)
    chosen = result.get("recommended")
    for t in result["trials"]:
        mark = (
            chosen is not None
            and t.get("status") == "ok"
            and (t.get("num_workers"), t.get("prefetch_factor"), t.get("pin_memory"))
            == (chosen.get("num_workers"), chosen.get("prefetch_factor"), chosen.get("pin_memory"))
        )
        first = t.get("first_batch_s")
        fits = t.get("fits_memory")
        uss = format_bytes(t.get("worker_uss_peak_bytes"))
        if t.get("worker_uss_growth_bytes"):
            uss += f" (+{format_bytes(t['worker_uss_growth_bytes'])})"
        cells = [str(t["num_workers"]), "-" if not t.get("prefetch_factor") else str(t["prefetch_factor"])]
        if with_pin:
            cells.append("yes" if t.get("pin_memory") else "no")
        cells += [
            t.get("status") or "?",
            _rate(t.get("samples_per_s") if t.get("status") in ("ok", "duplicates") else None),  # a dead trial's is not
            _predicted(t),
            "-" if t.get("vs_best") is None else f"{100 * t['vs_best']:.0f}%",
            "-" if first is None else f"{first:.2f}s",
            uss,
            format_bytes(t.get("shm_peak_delta_bytes")),
            format_bytes(t.get("projected_epoch_bytes")),
            "-" if fits is None else ("yes" if fits else "NO"),
        ]
        table.add_row(*cells, style="bold green" if mark else None)
    return table


def tune_summary(result: TuneResult, plot_path: str | None = None) -> Group:
    cpu = result.get("cpu") or {}
    memory = result.get("memory") or {}
    head = Text()
    head.append("dlprobe tune", style="bold cyan")
    head.append(
        f" {result['script']} (loader {result['loader']})  {len(result['trials'])} trials in "
        f"{result['elapsed_s']:.0f}s of a {result['budget_s']:.0f}s budget; {cpu.get('usable_cores')} usable "
        f"core(s), {format_bytes(memory.get('budget_bytes'))} memory available ({memory.get('source')})"
    )
    parts: list[RenderableType] = [head, trials_table(result)]
    for t in result["trials"]:
        if t.get("error"):
            parts.append(Text(f"  trial {t['key']}: {t['status']}: {t['error']}", style="yellow"))
    predicted = prediction_line(result)
    if predicted:
        parts.append(Text(predicted, style="dim"))
    for note in result.get("notes") or []:
        parts.append(Text(f"note: {note}", style="dim"))
    chosen = result.get("recommended")
    if chosen:
        settings = [f"num_workers={chosen['num_workers']}"]
        if chosen["num_workers"]:
            settings += [f"prefetch_factor={chosen['prefetch_factor']}", "persistent_workers=True"]
        if chosen.get("pin_memory"):
            settings.append("pin_memory=True")
        line = Text("recommended: ", style="bold green")
        line.append(f"DataLoader(..., {', '.join(settings)})", style="bold")
        parts.append(line)
    else:
        parts.append(Text("no recommendation", style="bold red"))
    parts.append(Text(f"why: {result['reason']}"))
    if plot_path:
        parts.append(Text(f"Saved {RunDir(result['dir']).tune_result} and {plot_path}", style="dim"))
    return Group(*parts)
