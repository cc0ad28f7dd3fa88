"""Entry point for `python -m dlprobe`."""

from dlprobe.cli import main

if __name__ == "__main__":
    main()
