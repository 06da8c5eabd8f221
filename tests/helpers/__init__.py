"""Shared test helpers: real servers with injected faults, tiny local models, fixture data.

Imported as ``helpers.<module>`` (``tests/`` is on the test path; see pyproject.toml).
"""
