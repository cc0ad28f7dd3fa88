"""Hang detection from outside: stalls, stack dumps, and stopping the process tree."""

# The options' values live here, not in watch.py: `dlprobe run` checks them before it starts the target, and
# watch.py's imports (a thread pool, logging) are paid only once the target is running.
DEFAULT_HANG_TIMEOUT_S = 60.0
ON_HANG_CHOICES = ("wait", "stop")
