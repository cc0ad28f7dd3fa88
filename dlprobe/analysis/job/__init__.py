"""A job of several ranks: the ranks' views, the cross-rank findings, the merge."""
