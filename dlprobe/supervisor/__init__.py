"""Code that runs in the dlprobe process outside the training: starts, samples, and outlives the target."""
