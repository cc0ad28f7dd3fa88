"""Renderers: each turns the report model into one kind of output."""
