"""The script's own training loop in tune: its step per sample, timed before the take-over (in_training/loop_clock)."""

from __future__ import annotations

from typing import Any

LOOP_STEPS = 8  # steady steps of the script's loop tune times before its trials (--loop-steps)
BUSY_LOOP_CPU = 0.5  # a loop whose step keeps this share of a core busy competes with the workers for the cores


def loop_seconds(loop: dict[str, Any] | None, batch_size: Any, trials: list[dict[str, Any]]) -> float | None:
    """The loop's own seconds per sample: its step per batch over the samples in a batch (the loader's batch_size,
    else what the trials counted per batch); None where the loop was not timed."""
    step = (loop or {}).get("loop_step_s")
    if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
        return None
    size: float = batch_size if isinstance(batch_size, int) and batch_size > 0 else 0
    if not size:
        samples = sum(t.get("samples") or 0 for t in trials)
        batches = sum(t.get("batches") or 0 for t in trials)
        size = samples / batches if samples and batches else 1
    return float(step) / size


def loop_words(loop: dict[str, Any] | None, loop_s: float | None) -> str | None:
    """The note tune prints about the loop it timed, or why it has none."""
    loop = loop or {}
    if loop_s is None:
        if loop.get("loop_steps") == 0:
            return (
                "the script's loop was not timed (it asked for no batch after its first step before the take-over): "
                "tune timed the loader alone, as if the training step took no time"
            )
        return None
    cpu = loop.get("loop_cpu_share")
    used = f", {100 * cpu:.0f}% of a core" if isinstance(cpu, (int, float)) else ""
    words = (
        f"the training loop's own step: {1000 * float(loop['loop_step_s']):.1f} ms a batch ({1 / loop_s:,.0f} "
        f"samples/s{used}), timed over {loop.get('loop_steps')} step(s) before the trials; the trials time the "
        "loader alone"
    )
    if isinstance(cpu, (int, float)) and cpu >= BUSY_LOOP_CPU:
        # A step on the CPU (a CPU model, augmentation in the loop) takes cores that the trials' workers had.
        words += (
            f", with every core to itself: while training, the step's {cpu:.1f} core(s) of CPU are not the "
            "workers' to use"
        )
    return words
