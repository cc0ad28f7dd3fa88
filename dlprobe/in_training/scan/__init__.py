"""The in-process half of `dlprobe scan`: checks samples with the script's own dataset."""
