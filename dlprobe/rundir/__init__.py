"""The run directory: the contract between the processes that record a run and everything that reads it."""
