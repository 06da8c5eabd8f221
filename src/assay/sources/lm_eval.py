"""The ``lm_eval`` source kind: an lm-evaluation-harness task whose documents, contexts,
continuations and few-shot examples lm-eval itself builds; assay scores them with its own backends.

``task`` names the task; ``include_path`` (a folder of task YAMLs, or one YAML file) is where it
is defined, else among lm-eval's installed tasks. lm-eval's ``TaskManager`` loads it, its few-shot
sampler is seeded with ``fewshot_seed`` (lm-eval's ``fewshot_random_seed``) and its
``build_all_requests`` makes the requests, exactly as ``simple_evaluate`` would; the requests then
become assay rows: a ``multiple_choice`` task gives one prompt row per document for the
score-choices stage (declare ``choices: {model: ...}``; a ``loglikelihood`` task's one
continuation is its one choice: :mod:`assay.sources.lm_eval_loglik`; winogrande's context per
choice: :mod:`assay.sources.lm_eval_winogrande`), a ``loglikelihood_rolling`` task one
document row for the score-documents stage (``perplexity: {model: ...}``) with the words and
bytes lm-eval's own ``process_results`` counts, a ``generate_until`` task one prompt row per
document for the generate stage (``generate: {model: ..., api: completions, params: ...}``,
params equal to the task's ``generation_kwargs``: :mod:`assay.sources.lm_eval_generate`), graded
by the task's own filters and metrics (verifier kind ``lm_eval``). ``apply_chat_template``,
``system_instruction`` and ``fewshot_as_multiturn`` are ``simple_evaluate``'s: lm-eval builds the
chat contexts, rendered by the model's template (:mod:`assay.sources.lm_eval_chat`). Other output
types are refused. A task whose reported number assay would not reproduce (a metric or
aggregation it does not compute, a filter) is refused (:mod:`assay.sources.lm_eval_metrics`); a
multiple_choice task's own ``process_results``, f1 and mcc are lm-eval's
(:mod:`assay.sources.lm_eval_mc`); the index, shared by every source of the process, refuses
groups and tags before any data loads, and task code's ``exit()`` is one spec error
(:mod:`assay.sources.lm_eval_index`). lm-eval is an optional dependency of this kind only
(``pip install 'assay[lm_eval]'``).

Example:
    >>> s = LmEvalSource.model_validate({"name": "mmlu", "kind": "lm_eval", "task": "mmlu_anatomy",
    ...                                  "choices": {"model": {"kind": "hf", "path": "m"}}})
    >>> s.fewshot_seed, s.choices.model.kind, s.perplexity is None
    (1234, 'hf', True)
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator

from assay.errors import SpecError
from assay.models.specs import _BackendEntry, backend_spec
from assay.paths import Paths
from assay.sources.base import Mode, SourceSpec
from assay.sources.registry import SOURCES
from assay.specbase import SpecModel

if TYPE_CHECKING:
    # lm-eval ships no type information (no py.typed): these name what the values are
    from lm_eval.api.instance import Instance
    from lm_eval.api.task import Task

    from assay.rows import Rows
    from assay.sources.lm_eval_index import Docs

INSTALL = "pip install 'assay[lm_eval]' (lm-eval 0.4)"


class LmEvalScoring(SpecModel):
    """The backend that scores the task's requests."""

    model: Annotated[Any, _BackendEntry()]

    @field_validator("model", mode="before")
    @classmethod
    def _backend(cls, v: object) -> object:
        return backend_spec(v)

    @property
    def target_delimiter(self) -> str:
        """Unused: each row carries its task's own delimiter (``privileged.delimiter``)."""
        return ""


@SOURCES.register("lm_eval")
class LmEvalSource(SourceSpec):
    """An lm-eval task's requests, scored by an assay backend."""

    WARM_IMPORTS: ClassVar[tuple[str, ...]] = ("datasets", "lm_eval.tasks", "lm_eval.api.task")
    lm_eval_task: ClassVar[bool] = True

    kind: Literal["lm_eval"]
    task: str = Field(description="the lm-eval task name; a group or tag expands into one "
                      "source per task, named <name>.<task> (assay.sources.lm_eval_group)")
    include_path: str | None = Field(
        None, description="a folder of task YAMLs, or one task YAML (then its folder is what "
        "lm-eval indexes), defining the task (relative to the spec file); unset: lm-eval's "
        "installed tasks")
    num_fewshot: int | None = Field(None, ge=0, description="override the task's num_fewshot "
                                    "(as simple_evaluate's, never a task's explicit 0)")
    fewshot_seed: int = Field(1234, description="lm-eval's fewshot_random_seed")
    limit: int | None = Field(None, ge=1, description="the first N documents (lm-eval's limit)")
    choices: LmEvalScoring | None = Field(
        None, description="a multiple_choice task: the model scoring each choice (a "
        "loglikelihood task: its one continuation)")
    perplexity: LmEvalScoring | None = Field(
        None, description="a loglikelihood_rolling task: the model scoring each document")
    gen_kwargs: dict[str, str | int | float | bool | list[str]] = Field(
        default_factory=dict, description="a generate_until task: override its "
        "generation_kwargs (as simple_evaluate's gen_kwargs, e.g. {max_gen_toks: 64}); "
        "generate.params must then equal them")
    apply_chat_template: bool = Field(
        False, description="as simple_evaluate's: lm-eval builds each context as chat messages, "
        "rendered by the model's chat template (kind: hf: its tokenizer's, sent with api: "
        "completions; a chat server: the messages, with generate: {api: chat}) "
        "(assay.sources.lm_eval_chat)")
    system_instruction: str | None = Field(
        None, description="as simple_evaluate's: a system instruction before the context (a "
        "system message under apply_chat_template, else text)")
    fewshot_as_multiturn: bool | None = Field(
        None, description="as simple_evaluate's: the few-shot examples as user/assistant turns "
        "(true) or one user turn (false); unset: true under apply_chat_template (lm-eval's "
        "default); needs apply_chat_template")

    @model_validator(mode="after")
    def _one_mode(self) -> LmEvalSource:
        if sum(x is not None for x in (self.choices, self.perplexity, self.generate)) != 1:
            raise ValueError("give choices: {model: ...} for a multiple_choice task, "
                             "perplexity: {model: ...} for a loglikelihood_rolling one or "
                             "generate: {model: ..., api: completions, params: ...} for a "
                             "generate_until one")
        if self.generate is None and self.verifier is not None:
            raise ValueError("an lm_eval source in choices or perplexity mode is scored by its "
                             "model's log-likelihoods; drop verifier")
        if self.generate is not None:
            # the task's own filters and metrics grade it: lm-eval's numbers, not a verifier's
            want = {"kind": "lm_eval", "params": self._verifier_params()}
            if self.verifier is not None and self.verifier.model_dump(
                    include={"kind", "params"}) != want:
                raise ValueError("a generate_until lm_eval source is graded by the task's own "
                                 "filters and metrics (verifier kind lm_eval, set for you); "
                                 "drop verifier")
            from assay.verify.spec import VerifierSpec

            object.__setattr__(self, "verifier", VerifierSpec.model_validate(want))
        if self.gen_kwargs and self.generate is None:
            raise ValueError("gen_kwargs: only for a generate_until task (generate:)")
        if self.fewshot_as_multiturn and not self.apply_chat_template:
            raise ValueError("fewshot_as_multiturn: needs apply_chat_template: true (as lm-eval)")
        if self.perplexity is not None and (self.apply_chat_template or
                                            self.system_instruction is not None):
            raise ValueError("apply_chat_template / system_instruction: a loglikelihood_rolling "
                             "task scores documents without a context; drop them")
        return self

    @property
    def multiturn(self) -> bool:
        """lm-eval's fewshot_as_multiturn as simple_evaluate passes it (unset: true)."""
        return self.fewshot_as_multiturn is not False and self.apply_chat_template

    def _chat_model(self) -> tuple[object, str | None]:
        """The model whose chat template renders the contexts, and its API (None: scoring)."""
        if self.generate is not None:
            return self.generate.model, self.generate.api
        return self.scoring_model, None

    def _verifier_params(self) -> dict[str, object]:
        """What the lm_eval verifier needs to load the task again (its filters and metrics)."""
        return {"task": self.task, "include_path": self.include_path,
                "gen_kwargs": dict(self.gen_kwargs)}

    @property
    def mode(self) -> Mode:
        if self.generate is not None:
            return "generate"
        return "choices" if self.choices is not None else "perplexity"

    @property
    def scoring_model(self) -> Any:
        if self.generate is not None:
            return None
        return (self.choices or self.perplexity).model  # type: ignore[union-attr]  # one is set

    def _where(self) -> str:
        return f"source {self.name!r} (lm-eval task {self.task!r})"

    def _include(self, paths: Paths) -> Path | None:
        return None if self.include_path is None else paths.resolve(self.include_path)

    def _folder(self, paths: Paths) -> Path | None:
        """The folder lm-eval indexes (a YAML file's own folder: lm-eval indexes folders)."""
        inc = self._include(paths)
        return None if inc is None else (inc.parent if inc.is_file() else inc)

    def files(self, paths: Paths) -> list[Path]:
        inc = self._include(paths)
        return [inc] if inc is not None and inc.suffix.lower() in (".yaml", ".yml") else []

    def definition_files(self, paths: Paths) -> list[Path]:
        """The task's definition and local data: the YAMLs and Python files lm-eval reads
        under ``include_path``'s folder and the local files its YAMLs name as ``data_files``."""
        folder = self._folder(paths)
        if folder is None:
            return []
        own = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                     and p.suffix.lower() in (".yaml", ".yml", ".py"))
        data: list[Path] = []
        for p in own:
            if p.suffix.lower() in (".yaml", ".yml"):
                data += [f for f in _data_files(p) if f.is_file()]
        return own + sorted(set(data) - set(own))

    def identity(self, paths: Paths) -> dict[str, object]:
        from importlib import metadata

        from assay.hashing import file_checksum

        ident = super().identity(paths)
        for mode in ("choices", "perplexity"):  # the model keys the scoring stage, not the rows
            if ident.get(mode) is None:
                ident.pop(mode, None)
            else:
                ident[mode] = {}
        ident.pop("include_path", None)
        if not ident.get("gen_kwargs"):  # unset: the identity of the sources before it existed
            ident.pop("gen_kwargs", None)
        # unset: the identity of the sources before the chat options existed
        for k in ("apply_chat_template", "system_instruction", "fewshot_as_multiturn"):
            ident.pop(k, None)
        if self.system_instruction is not None:
            ident["system_instruction"] = self.system_instruction
        if self.apply_chat_template:  # the rendered contexts depend on the model's template
            from assay.sources.lm_eval_chat import template_identity

            ident["chat"] = {"multiturn": self.multiturn,
                             **template_identity(*self._chat_model())}
        # contents, not places: moving the folder changes nothing, editing a file does
        folder = self._folder(paths)
        ident["files"] = sorted(
            [p.relative_to(folder).as_posix() if folder is not None and folder in p.parents
             else "(data)",
             file_checksum(p)] for p in self.definition_files(paths))
        try:
            ident["lm_eval"] = metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            ident["lm_eval"] = None
        return ident

    def check(self, paths: Paths) -> tuple[list[str], list[str]]:
        try:
            import lm_eval  # noqa: F401
        except ImportError:
            return [f"kind: the lm_eval source kind needs lm-eval: {INSTALL}"], []
        inc = self._include(paths)
        if inc is not None and not inc.exists():
            return [f"include_path: {inc} does not exist"], []
        try:
            self.build_rows(paths)
        except SpecError as e:
            return [f"task: {e}"], []
        if self.generate is not None:  # a sampled task's results are not HFLM's: say so
            from assay.sources.lm_eval_generate import sampled_warnings

            return [], sampled_warnings(self.generate)
        return [], []

    def build_rows(self, paths: Paths) -> Rows:
        task, docs = task_requests(self, paths)
        if self.generate is not None:
            from assay.sources.lm_eval_generate import (
                check_declared,
                generate_rows_of,
                sampling_of,
            )

            check_declared(self.generate,
                           sampling_of(task.get_config("generation_kwargs"), self._where()),
                           self._where(), chat=self.apply_chat_template)
            return generate_rows_of(task, docs, self._where(), chat=self.apply_chat_template)
        if self.choices is not None:
            if self.apply_chat_template and (task.get_config("output_type") == "loglikelihood"
                                             or getattr(task, "multiple_input", 0)):
                raise SpecError(f"{self._where()}: apply_chat_template: supported for "
                                "multiple_choice tasks with one context (and generate_until "
                                "ones); not for a loglikelihood or multiple-input task")
            if task.get_config("output_type") == "loglikelihood":
                from assay.sources.lm_eval_loglik import loglik_rows_of

                return loglik_rows_of(task, docs, self._where())
            if getattr(task, "multiple_input", 0):  # winogrande: a context per choice
                from assay.sources.lm_eval_winogrande import multi_input_rows_of

                return multi_input_rows_of(task, docs, self._where())
            return choice_rows_of(task, docs, self._where(), chat=self.apply_chat_template)
        return document_rows_of(task, docs, self._where())


def _data_files(yaml_path: Path) -> list[Path]:
    """Local files a task YAML names under ``dataset_kwargs.data_files`` (tags like
    ``!function`` read as text)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("!", lambda loader, suffix, node: None)
    try:
        doc = yaml.load(yaml_path.read_text(), Loader=Loader)  # noqa: S506 (safe loader)
    except (yaml.YAMLError, OSError, UnicodeDecodeError):
        return []
    files = ((doc or {}).get("dataset_kwargs") or {}).get("data_files") if isinstance(doc, dict) \
        else None
    found: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, str):
            found.append(v)
        elif isinstance(v, list | tuple):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(files)
    return [p if p.is_absolute() else yaml_path.parent / p for p in map(Path, found)]


def task_requests(source: LmEvalSource, paths: Paths) -> tuple[Task, Docs]:
    """lm-eval's task object and its requests as ``(doc_id, doc, instances)`` in document
    order, built as ``simple_evaluate`` builds them (one process, rank 0)."""
    from assay import libguard

    where = source._where()
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        raise SpecError(f"{where}: the lm_eval source kind needs lm-eval: {INSTALL}") from None
    inc = source._include(paths)
    if inc is not None and not inc.exists():
        raise SpecError(f"{where}: include_path {inc} does not exist")
    from assay.sources.lm_eval_index import task_code, task_entry, task_manager, yaml_config
    from assay.sources.lm_eval_metrics import config_refusal, output_type, task_refusal

    want = ("generate_until" if source.generate is not None else
            "multiple_choice" if source.choices is not None else "loglikelihood_rolling")
    # lm-eval loads data through datasets' loaders: one at a time in this process (libguard)
    with libguard.datasets():
        with task_code(where, "index the tasks"):
            tm = task_manager(source._folder(paths))
        # what the index says decides before any data loads: groups, output type, metrics
        cfg = yaml_config(task_entry(tm, source.task, where))
        if cfg is not None:
            _refuse_output_type(output_type(cfg), want, where)
            why = config_refusal(cfg)
            if why is not None:
                raise SpecError(f"{where}: {why}; refused")
        with task_code(where, "load the task"):
            loaded = tm.load([source.task])
        tasks = loaded.get("tasks") or {}
        if loaded.get("groups") or len(tasks) != 1:
            raise SpecError(f"{where}: {source.task!r} is a group or tag of {len(tasks)} tasks "
                            f"({sorted(tasks)[:6]}); give one source per task")
        task = next(iter(tasks.values()))
        with task_code(where, "read the task's metrics"):
            _refuse_output_type(task.get_config("output_type"), want, where)
            why = task_refusal(task)
        if why is not None:
            raise SpecError(f"{where}: {why}; refused")
        # simple_evaluate's order: num_fewshot (a task's explicit 0 stands), then the seed
        if source.num_fewshot is not None and task.get_config("num_fewshot") != 0:
            task.set_config(key="num_fewshot", value=source.num_fewshot)
        elif task.get_config("num_fewshot") is None:
            task.set_config(key="num_fewshot", value=0)
        task.set_fewshot_seed(seed=source.fewshot_seed)
        if source.gen_kwargs:  # simple_evaluate's gen_kwargs: an update of the task's
            task.set_config(key="generation_kwargs", value=dict(source.gen_kwargs), update=True)
        chat = None
        if source.apply_chat_template:  # lm-eval renders through the model's template
            from assay.sources.lm_eval_chat import chat_template_for

            chat = chat_template_for(*source._chat_model(), where)
        with task_code(where, "build the requests"):
            # simple_evaluate's arguments: the template only when apply_chat_template is set
            task.build_all_requests(limit=source.limit, rank=0, world_size=1,
                                    system_instruction=source.system_instruction,
                                    apply_chat_template=source.apply_chat_template,
                                    fewshot_as_multiturn=source.multiturn,
                                    chat_template=chat)
    by_doc: dict[int, list[Instance]] = {}
    for inst in task.instances:
        by_doc.setdefault(inst.doc_id, []).append(inst)
    docs = [(d, insts[0].doc, sorted(insts, key=lambda i: i.idx))
            for d, insts in sorted(by_doc.items())]
    if not docs:
        raise SpecError(f"{where}: the task has no documents")
    return task, docs


def _refuse_output_type(out: object, want: str, where: str) -> None:
    # a loglikelihood task's one continuation is scored as a choice (lm_eval_loglik)
    if out != want and (want, out) != ("multiple_choice", "loglikelihood"):
        hint = ("a generate_until task needs generated answers: give generate: {model: ..., "
                "api: completions, params: ...} instead (its own filters and metrics grade them)"
                if out == "generate_until" else
                "choices: {model: ...} scores multiple_choice and loglikelihood tasks, "
                "perplexity: {model: ...} "
                "loglikelihood_rolling ones, generate: {model: ...} generate_until ones; other "
                "output types are not supported")
        raise SpecError(f"{where}: the task's output_type is {out!r}, not {want!r}; {hint}")


def choice_rows_of(task: Task, docs: Docs, where: str, *,
                   chat: bool = False) -> Rows:
    """One prompt row per document: lm-eval's context, its choices and gold index, and the
    delimiter lm-eval's requests put before each choice (``privileged.delimiter``: the task's
    target delimiter, none under a chat template) the score-choices stage scores with."""
    from assay.sources.lm_eval_chat import request_delimiter
    from assay.sources.lm_eval_index import doc_meta, task_code
    from assay.sources.lm_eval_loglik import prompt_rows

    delim = request_delimiter(task, chat)
    prompts, privileged, tids, metas = [], [], [], []
    for doc_id, doc, insts in docs:
        at = f"{where} document {doc_id}"
        args = [i.arguments for i in insts]
        if len({a[0] for a in args}) != 1:
            raise SpecError(f"{at}: the choices have different contexts (a multiple-input task "
                            "such as winogrande); not supported")
        with task_code(at, "read the document's choices and answer"):
            choices = [str(c) for c in task.doc_to_choice(doc)]
            gold = task.doc_to_target(doc)
        if [a[1] for a in args] != [delim + c for c in choices]:
            raise SpecError(f"{at}: the requests are not the target delimiter + each choice "
                            "(acc_mutual_info adds unconditional requests); not supported")
        if isinstance(gold, str) and gold in choices:
            gold = choices.index(gold)
        if isinstance(gold, list) or not isinstance(gold, int) or not 0 <= gold < len(choices):
            raise SpecError(f"{at}: the gold answer {gold!r:.60} is not one index of the "
                            f"{len(choices)} choices (multiple targets are not supported)")
        prompts.append(args[0][0])
        privileged.append({"reference": choices[gold], "choices": choices, "gold": gold,
                           "delimiter": delim})
        tids.append(str(doc_id))
        metas.append(doc_meta(doc))
    return prompt_rows(prompts, privileged, tids, metas, where)


def document_rows_of(task: Task, docs: Docs, where: str) -> Rows:
    """One document row per document: the text lm-eval scores in rolling windows, and the
    words and bytes its ``process_results`` counts (wikitext counts the raw page)."""
    from assay.builder import rows
    from assay.sources.documents import count_bytes, count_words
    from assay.sources.lm_eval_index import doc_meta, task_code
    from assay.sources.lm_eval_metrics import rolling_counts

    texts, tids, metas, markers = [], [], [], []
    for doc_id, doc, insts in docs:
        text = insts[0].arguments[0]
        if not isinstance(text, str) or not text:
            raise SpecError(f"{where} document {doc_id}: lm-eval's request is {text!r:.40}, "
                            "not a non-empty text")
        # a log-likelihood of 0 makes process_results hand back just its counts; a second one
        # checks they are lm-eval's (log-likelihood, count) pairs, as assay's perplexity reads
        with task_code(f"{where} document {doc_id}", "count the document's words and bytes"):
            counted = task.process_results(doc, (0.0,))
            again = task.process_results(doc, (-1.5,))
        why = rolling_counts(counted, again, -1.5)
        if why is not None:
            raise SpecError(f"{where} document {doc_id}: {why}; refused")
        words = counted.get("word_perplexity", (0.0, count_words(text)))[1]
        nbytes = counted.get("byte_perplexity", counted.get("bits_per_byte",
                                                             (0.0, count_bytes(text))))[1]
        texts.append(text)
        tids.append(str(doc_id))
        metas.append(doc_meta(doc))
        markers.append({"words": float(words), "bytes": float(nbytes)})
    return rows(texts, [""] * len(texts), None, task_ids=tids, meta=metas, markers=markers,
                record_names=lambda i: f"document {tids[i]}")

