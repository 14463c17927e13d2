"""Batch suggest and encoding speed of a saved project, stage by stage."""
