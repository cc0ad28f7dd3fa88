"""Every output of every command, rendered from its one result (report, scan/tune/triage result, check rows).

The interface, the same for each command: a terminal renderer is a pure function `<command>_summary(result, ...)`
that returns a rich renderable (the command prints it, tests render it at a fixed width); a file renderer is
`write_<format>(path, ...)` or `plot_<thing>(result, path)`. Renderers read no run directory and run nothing.
"""
