"""Nightly evals as an operation: regression gates, the history of every night, alerts.

Core library (no Prefect): ``spec`` (the ``nightly:`` section), ``gates``, ``history``, ``notify``.
"""
