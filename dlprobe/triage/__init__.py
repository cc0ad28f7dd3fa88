"""`dlprobe triage LOGFILE`: explain a DataLoader failure that already happened, from its log and the machine."""
