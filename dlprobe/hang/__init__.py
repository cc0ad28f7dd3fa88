"""Hang and dead-worker evidence gathered by the supervisor: process state, stacks, stopping the tree."""
