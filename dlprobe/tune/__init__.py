"""`dlprobe tune`: measure the script's own DataLoader under other settings and recommend one."""
