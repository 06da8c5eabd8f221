"""Library state that a study's graph nodes share, named in one place: the heavy imports a spec
needs (done completely before its nodes run side by side) and the lock around ``datasets``.

Why: a study's nodes are threads of one process (the local runner's, or a Dask worker's with
``--nthreads`` > 1), and some libraries keep process-wide state that another thread must never
see half done:

- An import in progress is module-level state. ``datasets``' pickler (it fingerprints every
  ``load_dataset`` call) reads torch, transformers, regex, ... as soon as their names are in
  ``sys.modules``, even while another thread is still importing them; transformers' lazy module
  resolves attributes by importing submodules another thread may be in the middle of; a worker
  process forked while a thread holds an import's lock inherits the lock held for ever.
- ``datasets``' loaders call ``tqdm.contrib.concurrent.thread_map``, which creates and then
  deletes the class-level ``_lock`` of datasets' tqdm class (progress bars off or not): two loads
  at once delete it under each other.

So: (1) :func:`prepare` imports every heavy library a spec's nodes use (each kind declares its
``WARM_IMPORTS``) before the graph starts, in the process that runs the nodes (a cluster worker
does it before its first node); only what the spec's kinds name, never on the fully cached path.
(2) Every call assay makes into ``datasets``' loaders holds :data:`LIBRARIES` (:func:`datasets`),
one at a time, with its progress bars off; imports done here hold it too, and so does the
grading pool while it forks its workers (assay.grading). Imports first and one lock, rather than
moving the work into processes: the libraries' state is only unsafe while it is being set up
(an import, a first load), and a process per node would pay the imports again for every node.

The rest of the list a reviewer checks, and why each needs nothing more:

- tokenizers: each encoder and model keeps its own tokenizer objects (none is reconfigured per
  call); the library turns its own thread pool off in a forked child.
- transformers, torch, sentence-transformers: imported by (1) when a kind names them
  (``HFSpec``, the reward models' ``WARM_IMPORTS``, the embedding model's choice of encoder);
  after the import, torch's thread pools keep their own locks.
- numba (decontamination's compiled loops): another thread that imports a module being
  imported waits for it (Python's per-module import locks), so only code that reads
  ``sys.modules`` itself (datasets' pickler: regex, spacy, tiktoken, torch, transformers) or a
  lazy module (transformers) can see an import half done; numba is neither, and its compiler
  holds a lock of its own.
- matplotlib: only the report node draws, on a ``Figure`` with the Agg canvas, outside pyplot's
  global state; its import is warmed with the measures' (assay.stages.plan.Preloader, via
  :func:`warm`).
- the grading pool: started once per process under its own lock (assay.grading); forked under
  :data:`LIBRARIES`, as above.
- model caches and the scoring worker: guarded where they live (a lock per cache; the scoring
  worker is a process of its own, started with ``subprocess``).

Example:
    >>> warm(["json", "no.such.module"])   # a failing import is left for its stage to raise
    >>> "json" in WARMED
    True
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Iterable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # a study spec (assay.spec.StudySpec) as this module reads it: the spec imports kinds that
    # import this module, so it is typed by its base class
    from pydantic import BaseModel as StudySpec

#: Held while a heavy import runs (:func:`warm`) and around every ``datasets`` load
#: (:func:`datasets`): the process-wide library state named in this module's docstring.
LIBRARIES = threading.RLock()

#: Imports done in this process (entries as given to :func:`warm`).
WARMED: set[str] = set()

#: What a transformers causal LM / tokenizer user needs resolved before nodes run side by side:
#: the lazy module's attributes ``datasets``' pickler and the model loaders read.
TRANSFORMERS = ("torch", "transformers:PreTrainedTokenizerBase", "transformers:AutoTokenizer")


def _import(entry: str) -> None:
    """``module`` or ``module:attribute`` (an attribute of a lazy module, resolved now)."""
    mod, _, attr = entry.partition(":")
    obj = importlib.import_module(mod)
    if attr:
        getattr(obj, attr)


def warm(modules: Iterable[str]) -> None:
    """Import ``modules`` (``module`` or ``module:attribute``) completely, once per process,
    holding :data:`LIBRARIES`. A failing import is left for the stage that needs it to raise
    with its own context (a missing optional dependency says how to install it there)."""
    todo = [m for m in dict.fromkeys(modules) if m not in WARMED]
    if not todo:
        return
    with LIBRARIES:
        for entry in todo:
            if entry in WARMED:
                continue
            with contextlib.suppress(Exception):
                _import(entry)
            WARMED.add(entry)


def _walk(obj: object, out: list[str], seen: set[int]) -> None:
    from pydantic import BaseModel

    if id(obj) in seen:  # also what the caller skips
        return
    seen.add(id(obj))
    if isinstance(obj, BaseModel):
        own = getattr(obj, "warm_imports", None)
        out.extend(own() if callable(own) else getattr(type(obj), "WARM_IMPORTS", ()))
        for name in type(obj).model_fields:
            _walk(getattr(obj, name, None), out, seen)
    elif isinstance(obj, list | tuple):
        for x in obj:
            _walk(x, out, seen)
    elif isinstance(obj, dict):
        for x in obj.values():
            _walk(x, out, seen)


def spec_imports(spec: StudySpec, skip: Iterable[object] = ()) -> tuple[str, ...]:
    """The heavy imports ``spec``'s nodes make in this process: every ``WARM_IMPORTS`` (or
    ``warm_imports()``) of the kinds it names, in spec order, without repeats; not those of
    the entries in ``skip`` (they run in a process of their own).

    Example:
        >>> from assay.spec import parse_spec
        >>> spec_imports(parse_spec("{name: d, sources: [{name: a, kind: file, path: a.jsonl, "
        ...                         "fields: {prompt: q, completion: c, reward: r}}]}"))
        ()
    """
    out: list[str] = []
    _walk(spec, out, {id(x) for x in skip})
    return tuple(dict.fromkeys(out))


#: The specs :func:`prepare` warmed in this process (their JSON), for :func:`prepare_node`.
_PREPARED: set[str] = set()


def prepare(spec: StudySpec, skip: Iterable[object] = ()) -> None:
    """:func:`warm` what ``spec``'s nodes import here (but ``skip``'s entries): call before
    nodes run side by side."""
    warm(spec_imports(spec, skip))
    _PREPARED.add(spec.model_dump_json())


def prepare_node(spec: StudySpec) -> None:
    """At the start of a node: :func:`prepare` unless this process already did for ``spec``
    (the flow's process did before its graph started; a cluster worker's first node does it,
    and its other threads' nodes wait for it on :data:`LIBRARIES`)."""
    if spec.model_dump_json() not in _PREPARED:
        prepare(spec)


@contextlib.contextmanager
def datasets() -> Iterator[ModuleType]:
    """The ``datasets`` module, held for one load (see the module docstring), progress bars
    off: assay reads data; it has its own progress lines."""
    with LIBRARIES:
        import datasets as ds

        ds.disable_progress_bars()
        yield ds
