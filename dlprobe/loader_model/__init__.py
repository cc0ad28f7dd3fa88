"""The model of a loader's rate and memory, one for `run`'s findings, `tune`, `attach` and `check`: pure functions on
plain numbers (no run directory, no torch), safe to import in the training process."""
