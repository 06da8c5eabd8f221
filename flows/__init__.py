"""Prefect flows: the study flow, the nightly flow, and the embedded server they run on."""
