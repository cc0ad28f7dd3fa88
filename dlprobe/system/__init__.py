"""Readers of the machine (procfs, cgroups, CPUs, the kernel log) used by both sides of the probe."""
