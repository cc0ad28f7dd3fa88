"""One module per subcommand: its typer command and the glue, nothing else."""
