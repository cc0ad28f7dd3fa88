"""Numbers about a run: pure functions of the loaded run, no Finding and no prose."""
