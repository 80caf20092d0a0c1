"""Cadences and triggers: which specs a cadence runs, and what each schedule or sensor tick submits."""
