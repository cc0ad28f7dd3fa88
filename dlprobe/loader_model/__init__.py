"""The loader's model: pure functions on plain numbers (rate, queueing, worker memory), below analysis and tune."""
