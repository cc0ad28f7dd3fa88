"""The script's own training loop in tune: its step per sample, timed before the take-over (in_training/loop_clock)."""

from __future__ import annotations

from typing import Any

from dlprobe.loader_model.limits import HEADROOM

LOOP_STEPS = 8  # steady steps of the script's loop tune times before its trials (--loop-steps)
BUSY_LOOP_CPU = 0.5  # a loop whose step keeps this share of a core busy competes with the workers for the cores
# A step this short is a loop that takes whatever comes (its CPU share over a few microseconds is the clock's noise:
# an HF stream's loop read "0.03 ms, 112% of a core"); it bounds nothing and its CPU is not said.
NEGLIGIBLE_STEP_S = 0.001


def loop_seconds(loop: dict[str, Any] | None, batch_size: Any, trials: list[dict[str, Any]]) -> float | None:
    """The loop's own seconds per sample: its step per batch over the samples in a batch as the trials counted them
    (their rates are in those samples; a packing collate may count other than batch_size), else the loader's
    batch_size; None where the loop was not timed."""
    step = (loop or {}).get("loop_step_s")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
        return None
    samples = sum(t.get("samples") or 0 for t in trials if t.get("status") == "ok")
    batches = sum(t.get("batches") or 0 for t in trials if t.get("status") == "ok")
    size: float = samples / batches if samples and batches else 0.0
    if not size:
        size = batch_size if isinstance(batch_size, int) and batch_size > 0 else 1
    return float(step) / size


def keeps_up(samples_per_s: float, loop_s: float | None, tolerance: float) -> bool:
    """Whether a loader this fast keeps the loop fed: HEADROOM times what the loop takes, within `tolerance`."""
    return bool(loop_s) and samples_per_s * (loop_s or 0.0) >= (1 - tolerance) * HEADROOM


def loop_words(loop: dict[str, Any] | None, loop_s: float | None) -> str | None:
    """The note tune prints about the loop it timed, or why it has none."""
    loop = loop or {}
    steps = loop.get("loop_steps")
    if loop_s is None:
        if isinstance(steps, int):
            return (f"the script's loop was not timed: {steps} steady step(s) (3 needed, its first left out) before it "
                    "stopped asking for batches or moved to another loader; tune timed the loader alone, as if the "
                    "training step took no time")  # fmt: skip
        return None
    step = float(loop["loop_step_s"])
    if step < NEGLIGIBLE_STEP_S:
        return (f"the training loop's own step: {1000 * step:.2f} ms a batch, the median of {steps} step(s) timed "
                "before the trials: a loop that takes whatever the loader gives, so it bounds nothing")  # fmt: skip
    cpu = loop.get("loop_cpu_share")
    used = f", {100 * cpu:.0f}% of a core" if isinstance(cpu, (int, float)) else ""
    words = (
        f"the training loop's own step: {1000 * step:.1f} ms a batch ({1 / loop_s:,.0f} "
        f"samples/s{used}), the median of {steps} step(s) timed before the trials (they ran for real); the trials "
        "time the loader alone"
    )
    if isinstance(cpu, (int, float)) and cpu >= BUSY_LOOP_CPU:
        # A step on the CPU (a CPU model, augmentation in the loop) takes cores that the trials' workers had.
        words += (
            f", with every core to itself: while training, the step's {cpu:.1f} core(s) of CPU are not the "
            "workers' to use"
        )
    return words
