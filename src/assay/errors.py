"""One exception family for assay: every error names where it happened and how to fix it.

Each class subclasses the builtin a caller would already catch (ValueError, TypeError, ...).
"""

from __future__ import annotations

#: Exit statuses of the ``assay`` command (documented in the README; scripts and schedulers
#: read them).
EXIT_OK = 0  # finished, every sample answered and graded
EXIT_FAILED = 1  # a stage failed (the error line names it and the log)
EXIT_INPUT = 2  # a problem in the inputs: the spec, a data file, a function it names
EXIT_REGRESSION = 3  # assay nightly: a gated metric regressed (store verify: corruption found)
EXIT_PARTIAL = 4  # finished with failed samples (gen_error rows): the numbers cover fewer tasks
EXIT_STOPPED = 5  # stopped by the run's deadline or stall detector; the rerun resumes
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT); SIGTERM is 143 (128 + 15)

class AssayError(Exception):
    """Base of every error assay raises on purpose."""


class HashError(AssayError, ValueError):
    """A value cannot be hashed canonically (NaN, unsupported type, non-string key)."""


class RowsError(AssayError, ValueError):
    """Bad input to `assay.rows()` or a measurement call; names argument, prompt and completion."""


class RowsTypeError(AssayError, TypeError):
    """Input of the wrong type (a non-string completion, a callable of the wrong arity)."""


class StoreError(AssayError, RuntimeError):
    """The content store cannot be used (unwritable root, unknown key format)."""


class StoreVanishedError(StoreError):
    """A stage's output is gone from the store right after it was computed (an internal failure:
    a worker wrote where the driver cannot read, or something removed it mid-run): exit 1."""

    internal = True


class StoreIOError(StoreError):
    """A write the object store took mid-run failed, or was never answered. Not an input
    problem (the store answered when the run began): exit 1, naming the node and the log."""

    internal = True


class StoreTimeoutError(StoreIOError):
    """The object store stopped answering mid-run: none of the writes handed to it finished
    within the bound (``ASSAY_STORE_PUT_WAIT_S``)."""


class StoreFullError(StoreIOError):
    """The store's disk is full (ENOSPC) or its quota spent (EDQUOT): a write failed part way.
    The message names the store and the file; free space, then rerun (what was committed is
    kept, and a journal's torn last line is skipped)."""


class DataError(AssayError, ValueError):
    """Bad preference data (empty text, chosen == rejected, missing seed id, bad cell)."""


class SpecError(AssayError, ValueError):
    """A study spec is invalid; the message carries the YAML path of each problem."""


class VerifierError(AssayError, ValueError):
    """A verifier is misconfigured (not raised for a failing candidate: that is a verdict)."""


class MeasureError(AssayError, ValueError):
    """A measurement cannot be computed from the rows given (no binary rewards, k < 1, ...)."""


class GenerationError(AssayError, RuntimeError):
    """The model under test cannot be asked (a 4xx the server will not retry, a model it does
    not serve, a backend that cannot load); failed single requests become error rows instead."""


class HistoryError(AssayError, FileNotFoundError):
    """A directory holds no nights (it is not one study's nightly root)."""


class NotifyError(AssayError, RuntimeError):
    """An alert could not be delivered (the night's verdict stands; the alert is what failed)."""


class ReportError(AssayError, FileNotFoundError):
    """A run directory has no report (the run never finished, or the path is wrong)."""


class RewardModelError(AssayError, ValueError):
    """A reward model cannot be loaded or used as asked (bad option, double BOS, bad output)."""
