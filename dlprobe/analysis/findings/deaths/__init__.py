"""Workers that died or raised: the death's cause, and the sample checked alone."""
