"""`dlprobe scan`: check every sample of a script's DataLoader dataset, in worker processes, without training."""
