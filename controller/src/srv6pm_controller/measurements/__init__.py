"""Measurements: collecting block results from the nodes and fanning them out."""
