"""The report on top: verdict, typed schema, timeline, trace and the other outputs' data."""
