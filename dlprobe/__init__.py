"""dlprobe: find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed."""

__version__ = "0.1.0"
