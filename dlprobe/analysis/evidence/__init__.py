"""The typed contract of each finding: Finding, and the evidence each code carries."""
