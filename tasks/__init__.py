"""Prefect tasks wrapping the study stages (see tasks/stages.py)."""
