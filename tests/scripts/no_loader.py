"""A script that never creates a DataLoader."""

print("hello without a loader")
