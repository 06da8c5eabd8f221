"""Records from the ``datasets`` library: a local ``save_to_disk`` folder, a folder of Parquet or
JSONL files, or a hub id (offline unless downloads are allowed). One loader for every consumer.

Prompt sources and reward-model preference data both read through :func:`load_dataset_records`.

Example:
    >>> import tempfile, datasets
    >>> d = tempfile.mkdtemp()
    >>> datasets.Dataset.from_dict({"q": ["1+1?", "2+2?"], "a": ["2", "4"]}).save_to_disk(d)
    >>> got = load_dataset_records(d)
    >>> got.records[1], got.split, got.checksum[:5]
    ({'q': '2+2?', 'a': '4'}, None, 'data:')
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from assay.errors import SpecError
from assay.hashing import content_hash

_DATA_SUFFIXES = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".csv": "csv"}


@dataclass(frozen=True)
class DatasetRecords:
    """What was read: the records, where from, and the content checksum of the records."""

    records: list[dict[str, object]]
    path: str
    name: str | None
    split: str | None
    revision: str | None
    checksum: str
    local: bool


@contextlib.contextmanager
def _offline(enabled: bool) -> Iterator[None]:
    """The hub client in offline mode (only what is already in the local cache is served)."""
    if not enabled:
        yield
        return
    import datasets.config as dc
    import huggingface_hub.constants as hc

    saved = (dc.HF_HUB_OFFLINE, hc.HF_HUB_OFFLINE)
    dc.HF_HUB_OFFLINE = hc.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        dc.HF_HUB_OFFLINE, hc.HF_HUB_OFFLINE = saved


def _pick_split(ds: Any, split: str | None, where: str,
                files: bool = False) -> tuple[Any, str | None]:
    """The split asked for, and its name: a split the data does not have is refused, and a
    dataset with several splits needs ``split:`` (none is picked silently)."""
    import datasets

    if isinstance(ds, datasets.DatasetDict):
        names = sorted(ds)
        unnamed = (" (its files are not named by split, so datasets reads them all as 'train')"
                   if files and names == ["train"] else "")
        if split is None:
            if len(names) == 1:
                return ds[names[0]], names[0]
            raise SpecError(f"{where}: split: the dataset has splits {names}; choose one with "
                            "split: (none is picked for you)")
        if split not in ds:
            raise SpecError(f"{where}: split {split!r} not found; the dataset has {names}{unnamed}")
        return ds[split], split
    own = str(ds.split) if getattr(ds, "split", None) is not None else None
    if split is not None and own is None:
        raise SpecError(f"{where}: split {split!r} not found: the data is one saved Dataset "
                        "without named splits; remove split: (every record is read)")
    if split is not None and split != own:
        raise SpecError(f"{where}: split {split!r} not found; the saved Dataset holds split "
                        f"{own!r} only")
    return ds, own


def local_data_problem(p: Path) -> str | None:
    """What is wrong with local data at ``p`` as assay reads it itself (a file it cannot open,
    a JSON line that does not parse, a Parquet file without a valid footer, a save_to_disk
    folder whose metadata does not parse), or None when every file reads: then a failure to
    load it is not the data's fault."""
    import json

    import pyarrow as pa
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from assay.jsonl import iter_jsonl

    saved = p.is_dir() and ((p / "dataset_info.json").exists()
                            or (p / "dataset_dict.json").exists())
    if saved:
        files = sorted(f for f in p.rglob("*") if f.suffix in (".json", ".arrow"))
    else:
        files = [p] if p.is_file() else sorted(f for f in p.rglob("*")
                                                 if f.suffix in _DATA_SUFFIXES)
    for f in files:
        try:
            if f.suffix == ".parquet":
                pq.read_metadata(f)
            elif f.suffix == ".arrow":
                with pa.memory_map(str(f)) as src:
                    pa.ipc.open_stream(src).read_all()
            elif f.suffix == ".csv":
                pcsv.read_csv(f)
            elif saved or f.suffix == ".json":  # one JSON document (or, .json, JSON lines)
                try:
                    json.loads(f.read_text(encoding="utf-8"))
                except ValueError:
                    if saved:
                        raise
                    for _ in iter_jsonl(f, where=str(f)):
                        pass
            else:
                for _ in iter_jsonl(f, where=str(f)):
                    pass
        except (OSError, ValueError, UnicodeDecodeError, pa.ArrowException) as e:
            return (f"cannot read {f}: {type(e).__name__}: {str(e)[:300]} (fix or replace the "
                    "file)")
    return None


def _hub_problem(e: BaseException) -> bool:
    """``e`` says a hub dataset is not in the local cache or cannot be fetched (offline, not
    found, a bad id: raised by the hub client, datasets' exceptions or as an OSError) or that
    the spec's arguments do not fit it (datasets' ValueErrors: a configuration or data_dir it
    does not have), as opposed to a failure inside the library while it loads (an
    AttributeError, a TypeError, ...)."""
    mod = type(e).__module__
    return isinstance(e, OSError | ValueError) or mod.startswith(
        ("huggingface_hub", "datasets.exceptions", "requests", "httpx", "fsspec"))


def is_local(path: str | Path) -> bool:
    """A folder or file on this machine (a hub id is anything else)."""
    return Path(path).exists()


def load_dataset_records(path: str | Path, *, name: str | None = None, split: str | None = None,
                         revision: str | None = None, allow_download: bool = False,
                         where: str = "dataset") -> DatasetRecords:
    """Every record of one split, through the ``datasets`` library.

    ``path`` is a folder written by ``save_to_disk``, a folder (or file) of Parquet/JSONL/CSV
    data (in a folder, files or subfolders named for ``split``, e.g. ``dev.jsonl``, are that
    split), or a hub id. A hub id is served from the local cache only, unless ``allow_download``;
    a miss says how to pre-download it or give a local path. Errors name ``where``.

    ``split``: which split to read; a split the data does not have is an error, and so is
    leaving it out when the data has more than one (a folder of files has the splits its file
    names give, as in ``datasets``: ``test-0.parquet``, ``train/...``; unnamed files are one
    split). ``DatasetRecords.split`` is the split read (None: one Dataset without a split name).
    """
    from assay import libguard

    p = Path(path)
    local = p.exists()
    # one load at a time, progress bars off: datasets' loaders share process-wide state
    # (assay.libguard says which); the records are copied out under the same hold
    with libguard.datasets() as datasets:
        return _load(datasets, p, path, name, split, revision, allow_download, where, local)


def _load(datasets: ModuleType, p: Path, path: str | Path, name: str | None, split: str | None,
          revision: str | None, allow_download: bool, where: str, local: bool
          ) -> DatasetRecords:
    try:
        if local and p.is_dir() and ((p / "dataset_info.json").exists()
                                     or (p / "dataset_dict.json").exists()):
            ds, split = _pick_split(datasets.load_from_disk(str(p)), split, where)
        elif local:
            files = [p] if p.is_file() else sorted(f for f in p.rglob("*")
                                                   if f.suffix in _DATA_SUFFIXES)
            if not files:
                raise SpecError(f"{where}: {p} holds no save_to_disk dataset and no "
                                f"{'/'.join(_DATA_SUFFIXES)} files")
            # a folder of one file (or folder) per split named exactly as asked (dev.jsonl for
            # split: dev) is that split, though datasets would call a dev file 'validation'
            named = [f for f in files if split is not None and split in (f.stem, f.parent.name)]
            builder = _DATA_SUFFIXES[(named or files)[0].suffix]
            if named and not p.is_file():
                dd = datasets.load_dataset(builder, data_files={split: [str(f) for f in named]})
            elif p.is_file():
                dd = datasets.load_dataset(builder, data_files={"train": [str(p)]})
            else:
                dd = datasets.load_dataset(builder, data_dir=str(p))
            ds, split = _pick_split(dd, split, where, files=True)
        else:
            with _offline(not allow_download):
                got = datasets.load_dataset(str(path), name, split=split, revision=revision)
            ds, split = _pick_split(got, split, where)
    except SpecError:
        raise
    except Exception as e:
        if isinstance(e, ValueError) and "split" in str(e).lower():
            raise SpecError(f"{where}: split {split!r}: {e}") from None
        if local:
            # Blamed on the data only when assay's own reading of it finds what is wrong;
            # otherwise the failure is the library's (or ours): it propagates with its
            # traceback (exit 1, the stage and run.log named), never "cannot read" a file
            # that reads fine.
            problem = local_data_problem(p)
            if problem is not None:
                raise SpecError(f"{where}: {problem}") from e
            raise
        if not _hub_problem(e):  # not the hub or its cache: the library's failure (exit 1)
            raise
        raise SpecError(
            f"{where}: {path!r} is not a local path and could not be loaded from the local hub "
            f"cache ({type(e).__name__}: {str(e)[:200]}). Pre-download it on a machine with "
            f"network (datasets.load_dataset({str(path)!r}{', ' + repr(name) if name else ''}, "
            f"revision=...).save_to_disk(DIR)) and give DIR as path, or set allow_download: true"
        ) from None
    records = ds.to_list()
    return DatasetRecords(records, str(path), name, split, revision,
                          content_hash(records, "data"), local)
