"""`dlprobe check`: a bounded probe run gated by rules from a TOML file, with baselines and JUnit output."""
