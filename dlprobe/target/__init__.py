"""Code that runs inside the probed training process (and its DataLoader workers)."""
