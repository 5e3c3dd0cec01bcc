"""Workflow definitions: the YAML model, validation, canonical form and immutable versions."""
