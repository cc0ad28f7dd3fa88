"""The model's caps and thresholds, shared by run's advice (analysis) and tune's sweep (inside the training process)."""

from __future__ import annotations

# The most workers advised or tried whatever the model says (each is a process with its own memory, file handles and
# start-up, and the storage one machine reads from stops scaling somewhere), and the share of their time workers must
# sleep to count as I/O-bound (more of them overlap more waits), or on a CPU (or queued for one) to count as CPU-bound.
WORKER_CAP = 32
IO_BOUND_WAIT = 0.5
CPU_BOUND_SHARE = 0.7
# A worker that got a core less than this share of the time it wanted one was queued behind other work: the cores
# left to the loader are fewer than the usable ones (above it, a tick of queueing is not a busy machine).
QUEUED_BELOW = 0.97
# How much faster than the loop needs them the loader's batches should come, so a slow batch does not stall it: the
# workers `run` advises, and the loader rate at which `tune` calls the loop, not the loader, the bound.
HEADROOM = 1.25
# The advised count where the cores bound: the fewest workers the queueing curve brings within this share of it (as
# tune's search measures first).
KNEE_SHORT = 0.05
# Where no reserve per worker was measured, workers may use this much of the memory left for them.
MEMORY_SHARE = 0.9
