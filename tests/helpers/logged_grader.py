"""A ``function`` verifier that logs every call (for tests that count who graded which row):
its source, written next to a spec as ``logged_grader.py``, and the log's counts."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

SOURCE = """
import os


def grade(completion, reference, row, log=""):
    # one line per call, from whichever process grades (O_APPEND: whole lines)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    os.write(fd, f"{row['task_id']} {row['rollout_index']}\\n".encode())
    os.close(fd)
    return float(reference in completion)
"""


def graded(log: Path) -> Counter:
    """``"task rollout"`` -> how many times it was graded."""
    return Counter(log.read_text().splitlines()) if log.exists() else Counter()
