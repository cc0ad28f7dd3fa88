"""The run as read back from its directory: RunData and the readers of its files."""
