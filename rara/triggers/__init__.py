"""Triggers: a run of a definition started by an event, once per event (docs/triggers.md)."""
