"""The folder `dlprobe run` puts first on the target's PYTHONPATH: it holds only the injected sitecustomize."""
