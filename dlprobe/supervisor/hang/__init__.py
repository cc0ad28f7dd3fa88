"""Hang detection from outside: stalls, stack dumps, and stopping the process tree."""
