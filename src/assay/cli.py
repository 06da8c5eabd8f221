"""The ``assay`` command: validate, run, nightly, history, report, view, schema, store du|verify|gc.

Only ``run`` and ``nightly`` import Prefect (lazily). Exit codes (``assay.errors.EXIT_*``): 0 ok;
1 an unexpected exception during ``run`` (the stage and OUTPUT/run.log named); 2 a usage, spec
or data error; 3 the check found a problem (``nightly``: a gated metric regressed; ``store
verify``: a corrupt entry); 4 ``run`` or ``nightly`` finished but some samples failed
(gen_error rows: the numbers cover fewer samples; a partial night is not a pass), or ``run``
finished with a source no row of which could be judged (run.json ``nothing_judged``); 5 stopped
by the spec's deadline or stall detector; 130 interrupted; 143 terminated.

Example:
    >>> main(["validate", "no/such/spec.yaml"])
    2
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import math
import os
import sys
import threading
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from assay.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PARTIAL, EXIT_STOPPED, AssayError
from assay.watchdog import RunStopped

if TYPE_CHECKING:
    from assay.spec import StudySpec


def _err(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    from assay.spec import check_data, check_files, load_spec

    # the overrides `assay run` takes: what is checked is the study that command would run
    spec = load_spec(args.spec, spec_overrides(args))
    problems = [] if args.no_files else check_files(spec)
    warnings: list[str] = []
    if not args.no_files and not problems:  # the files are there: read them
        problems, warnings = check_data(spec)
    for w in warnings:
        print(f"warning: {args.spec}: {w}", file=sys.stderr)
    if problems:
        _err(_problems_text(args.spec, problems))
        return 2
    stages = [f"sources: {', '.join(s.name for s in spec.sources) or '-'}"]
    if spec.decontaminate:
        stages.append(f"decontaminate: {len(spec.decontaminate.corpus)} corpus file(s)")
    if spec.reward:
        stages.append(f"reward models: {', '.join(m.name for m in spec.reward.models)}")
    print(f"{args.spec}: ok ({'; '.join(stages)})")
    if not args.no_files:
        print(f"checksum: {spec.checksum()}")
    return 0


def _problems_text(spec_path: str, problems: list[str]) -> str:
    """The spec's problems, each at its line of the spec file (``validate``'s report)."""
    import yaml

    from assay.spec import locate

    root = yaml.compose(Path(spec_path).read_text(encoding="utf-8-sig"))
    counted = (" (records and lines count from 1)" if any("record " in p for p in problems)
               else "")
    return (f"{spec_path} has {len(problems)} problem(s){counted}:\n  "
            + "\n  ".join(locate(p, root, spec_path).replace("\n", "\n    ")
                           for p in problems))


def _local_data_problems(spec: StudySpec) -> list[str]:
    """What ``validate`` finds in the records of the spec's local data files (``kind: file``:
    a bad JSON line, a field the records lack), for ``run`` to say before Prefect starts (a
    second or two) rather than from the build-rows node (seconds of start-up later). Hub and
    plugin sources are left to the run: checking them may need the network."""
    from assay.sources.file import FileSource

    problems = []
    for i, s in enumerate(spec.sources):
        if isinstance(s, FileSource):
            problems += [f"sources[{i}].{p}" for p in s.check(spec.paths)[0]]
    return problems


def cmd_report(args: argparse.Namespace) -> int:
    from assay.report import read_report

    run_dir = Path(args.run_dir)
    if run_dir.name in ("report.md", "report.json") and not run_dir.is_dir():
        run_dir = run_dir.parent  # `assay report RUN/report.md` names the run's folder too
    if args.json:
        p = run_dir / "report.json"
        if not p.is_file():
            _err(f"{p} not found: {run_dir} is not a finished run directory")
            return 2
        sys.stdout.write(p.read_text(encoding="utf-8"))
        return 0
    sys.stdout.write(read_report(run_dir))
    return 0


def cmd_view(args: argparse.Namespace) -> int:
    from assay.view import write_view

    page = write_view(args.run_dir, args.against)
    print(page)
    if args.serve:
        from assay.view.serve import serve

        with contextlib.suppress(KeyboardInterrupt):
            serve(page.parent, args.port)
    return 0


#: Marks a report.md whose folder a later run did not finish writing.
STALE_MARK = "> **Stale report.**"


def mark_stale(out: Path, why: str) -> bool:
    """Put a banner on ``out/report.md`` (if there is one): the latest run into the folder did
    not finish, so the report is an earlier run's. A finished run rewrites the file without it.
    Returns whether a report was marked.

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp())
        >>> _ = (d / "report.md").write_text("# Study `x`\\n")
        >>> mark_stale(d, "failed: bad input"), (d / "report.md").read_text().splitlines()[0][:20]
        (True, '> **Stale report.** ')
    """
    from assay.store import atomic_write

    p = out / "report.md"
    if not p.is_file():
        return False
    text = p.read_text(encoding="utf-8")
    if text.startswith(STALE_MARK):  # marked by an earlier failure: keep one banner
        text = text.split("\n\n", 1)[1] if "\n\n" in text else ""
    why = " ".join(why.split())[:300]
    banner = (f"{STALE_MARK} The latest `assay run` into this folder did not finish ({why}); "
              "what follows is an earlier run's report. Rerun to replace it.\n\n")
    atomic_write(p, (banner + text).encode("utf-8"))
    return True


def cmd_schema(args: argparse.Namespace) -> int:
    from assay.spec import json_schema_text

    plugins = list(args.plugin or [])
    if args.spec:  # the kinds a spec's plugins register appear in its schema
        import yaml

        doc = yaml.safe_load(Path(args.spec).read_text(encoding="utf-8")) or {}
        base = str(Path(args.spec).resolve().parent)
        if base not in sys.path:
            sys.path.insert(0, base)
        plugins += list(doc.get("plugins") or [])
    text = json_schema_text(plugins)
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8") if Path(args.check).exists() else ""
        if current != text:
            _err(f"{args.check} is out of date; regenerate with `assay schema --output "
                 f"{args.check}`")
            return 1
        print(f"{args.check}: up to date")
        return 0
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


#: Exit status when the reader of stdout closed the pipe (128 + SIGPIPE, as a shell reports).
EXIT_BROKEN_PIPE = 141

#: Set by a run that used its own embedded server: the process may then skip interpreter
#: teardown (see :func:`console`).
_EMBEDDED_RUN_DONE = False

#: The current run's log file and whether tracebacks go to the terminal (``--debug``).
_RUN: dict[str, object] = {}


#: run.json's note (and the terminal's) when every node was served from the store.
SERVED_NOTE = ("none: every stage node was already in the store, so no Prefect server was "
               "started and no flow run was recorded (--no-fast-path records one)")


def _serve_cached(args: argparse.Namespace, t0: float) -> dict[str, Any] | None:
    """Serve a run whose every node is cached straight from the store, before any Prefect
    start-up (seconds of the embedded server for nothing new); its run.json. None when anything
    is missing or the spec has problems: the orchestrated run then computes, or reports them."""
    from assay.spec import check_files, load_spec
    from assay.stages.cache import print_progress, summarize
    from assay.stages.finish import finish_run
    from assay.stages.plan import serve_cached
    from assay.store import Store

    started = time.time()
    try:
        overrides = spec_overrides(args)
        spec = load_spec(args.spec, overrides)
        if check_files(spec):
            return None
        store = Store(args.store)
        with store.in_use():
            run = serve_cached(spec, store, progress=None)
            if run is None:
                return None
            _say_store(args)
            out = spec.output_dir(args.output)
            for r in run.results:
                print_progress(r)
            info = finish_run(store, spec, run, out, started, note=SERVED_NOTE,
                              overrides=overrides)
    except Exception:  # noqa: BLE001  (the flow meets it again and reports it properly)
        return None
    (out / "run.log").write_text(f"served from the store: {SERVED_NOTE}\n", encoding="utf-8")
    if spec.execution.view and not args.no_view:
        from assay.view import write_view

        try:
            print(f"view: {write_view(out)}", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001 (the results stand; the page is a convenience)
            print(f"warning: the page {out / 'view'} was not written: {type(e).__name__}: {e} "
                  f"(retry with `assay view {out}`)", file=sys.stderr, flush=True)
    print(summarize(run.results), file=sys.stderr, flush=True)
    if "sent" in info:
        print("generation: 0 requests sent: all {} completions served from the cache (this run "
              "asked the model nothing)".format(info.get("completions", 0)),
              file=sys.stderr, flush=True)
    print("[prefect] not started: every stage was cached (run.json: orchestration)",
          file=sys.stderr, flush=True)
    print(f"done in {time.perf_counter() - t0:.1f} s: {len(info['cached'])} stage(s) cached, "
          f"0 computed; report in {out}/report.md", file=sys.stderr)
    return info


def cmd_run(args: argparse.Namespace) -> int:
    from assay.flows.embedded import apply_local_settings, embedded_server, require_real_server
    from assay.spec import check_files, load_spec

    global _EMBEDDED_RUN_DONE
    t0 = time.perf_counter()
    user_level = os.environ.get("PREFECT_LOGGING_LEVEL")
    apply_local_settings(_locate(args, [args.spec]))
    os.environ["ASSAY_STORE"] = args.store  # one location (_locate): workers see the same
    _RUN["debug"] = bool(args.debug)
    if not args.no_fast_path:
        served = _serve_cached(args, t0)
        if served is not None:  # a cached study that judged nothing is still partial
            return _outcome(served)
    # The embedded server is launched first: its start-up overlaps loading the spec and
    # importing Prefect here. A bad spec stops it again before Prefect is imported.
    overrides = spec_overrides(args)
    with embedded_server() as server:
        spec = load_spec(args.spec, overrides)
        problems = check_files(spec)
        if problems:
            _err(f"{args.spec}: " + "; ".join(problems))
            return 2
        out = spec.output_dir(args.output)
        _RUN["log"] = log_path = out / "run.log"
        problems = _local_data_problems(spec)  # the data's lines, as validate reads them
        if problems:
            text = _problems_text(args.spec, problems)
            # what a failed run leaves, before Prefect starts: the log says why, and a report
            # from an earlier run is marked stale (the data it was made from changed)
            out.mkdir(parents=True, exist_ok=True)
            log_path.write_text(f"assay run {args.spec} failed before the study started:\n"
                                f"{text}\n", encoding="utf-8")
            mark_stale(out, f"failed: SpecError: {problems[0]}")
            _err(text)
            return 2
        _say_store(args)
        require_real_server(spec.execution.runner, embedded=server is not None)
        _RUN["debug"] = debug = bool(args.debug) or spec.execution.log_level == "debug"
        if user_level is None:
            os.environ["PREFECT_LOGGING_LEVEL"] = spec.execution.log_level.upper()
        if server is not None:
            os.environ["ASSAY_EMBEDDED_API"] = "1"
            print(f"[prefect] embedded API server on {server.api_url} "
                  f"(PREFECT_HOME={os.environ['PREFECT_HOME']})", file=sys.stderr, flush=True)
        # the study's graph starts now; the flow run records it once Prefect is up
        with _head_start(args, spec, overrides):
            try:
                # Prefect imports while the server starts (and the head start works)
                from assay.flows.study import capture_logs, prewarm, run_spec

                # Prefect's records (a failure's come with tracebacks) go to the run's log file;
                # the terminal gets progress and one line per error (see main)
                with capture_logs(log_path, echo=debug):
                    try:
                        if server is not None:
                            prewarm()
                            server.wait()
                        result = run_spec(args.spec, args.output, args.store,
                                          embedded=server is not None, view=not args.no_view,
                                          overrides=overrides, max_parallel=args.max_parallel)
                    except BaseException as e:
                        logging.getLogger("assay.cli").error(
                            "assay run %s failed in %s", args.spec,
                            getattr(e, "assay_stage", None) or "the study flow", exc_info=True)
                        why = ("interrupted" if isinstance(e, KeyboardInterrupt)
                               else f"failed: {type(e).__name__}: {e}")
                        mark_stale(out, why)
                        raise
            finally:
                os.environ.pop("ASSAY_EMBEDDED_API", None)
                _EMBEDDED_RUN_DONE = server is not None
    failed = result.get("failed_samples") or {}
    head = "done" if not failed else "done with failed samples"
    print(f"{head} in {time.perf_counter() - t0:.1f} s: {len(result['cached'])} stage(s) cached, "
          f"{len(result['computed'])} computed; report in {result['output']}/report.md",
          file=sys.stderr)
    return _outcome(result)


def _outcome(info: dict[str, Any]) -> int:
    """Print what the finished run leaves out (failed samples, sources nothing judged); its
    exit status."""
    from assay.stages.finish import outcome

    lines, status = outcome(info)
    for line in lines:
        print(line, file=sys.stderr)
    return status


def _head_start(args: argparse.Namespace, spec: StudySpec,
                overrides: list[str]) -> contextlib.AbstractContextManager[object]:
    """Start the study's graph now, before Prefect is up: the flow run then records each node
    by waiting for it (``assay.stages.headstart``). A no-op context where it does not apply."""
    from assay.stages.headstart import HeadStart, key_for, running

    if not HeadStart.wanted(spec):
        return contextlib.nullcontext()
    from assay.stages.plan import LOCAL_CAPACITY
    from assay.store import Store

    store = Store(args.store)
    head = HeadStart(spec, store, max_parallel=args.max_parallel, capacity=LOCAL_CAPACITY,
                     key=key_for(args.spec, overrides, store))
    return running(head)


def spec_overrides(args: argparse.Namespace) -> list[str]:
    """``--model``/``--revision`` then every ``--set`` (later items win)."""
    from assay.overrides import checkpoint_overrides

    return [*checkpoint_overrides(args.model, args.revision), *(args.set or [])]


def add_override_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", help="the checkpoint under test for every generating source: the "
                   "served name (openai) or the model directory / hub id (hf)")
    p.add_argument("--revision", help="the checkpoint's revision (generate.model.revision)")
    p.add_argument("--set", action="append", metavar="PATH=VALUE",
                   help="override a spec field, e.g. generate.model.base_url=http://h:8000/v1 "
                   "(generate.* applies to every generating source; sources.NAME.* to one; the "
                   "value is YAML); repeatable")


def cmd_nightly(args: argparse.Namespace) -> int:
    import datetime as dt

    from assay.flows.embedded import apply_local_settings, embedded_server
    from assay.nightly.spec import night_date, specs_timezone
    from assay.spec import check_files, load_spec

    if args.night is not None:
        try:
            dt.date.fromisoformat(args.night)
        except ValueError:
            _err(f"--night {args.night!r}: give a date YYYY-MM-DD")
            return 2
    user_level = os.environ.get("PREFECT_LOGGING_LEVEL")
    apply_local_settings(_locate(args, args.spec))
    store = args.store  # one location (_locate), URL or absolute path
    os.environ["ASSAY_STORE"] = store
    from assay.store_url import secret_bearing

    if secret_bearing(store):  # a key in the URL must not become a flow parameter
        store = None
    overrides = spec_overrides(args)
    # Every spec is checked before a server starts: a cron job with a typo fails in a second.
    specs = [load_spec(p, overrides) for p in args.spec]
    try:  # tonight in the operator's time: nightly.timezone, else this machine's
        night = args.night or night_date(timezone=specs_timezone([s.nightly for s in specs]))
    except ValueError as e:
        _err(str(e))
        return 2
    for path, spec in zip(args.spec, specs):
        problems = check_files(spec)
        if problems:
            _err(f"{path}: " + "; ".join(problems))
            return 2
        if spec.execution.runner != "local" and not os.environ.get("PREFECT_API_URL"):
            _err(f"{path}: execution.runner {spec.execution.runner} needs a real Prefect server "
                 "(set PREFECT_API_URL); without one `assay nightly` runs runner: local only")
            return 2
    # Prefect's records (a failed alert's come with a traceback) go to the night's run.log;
    # the terminal gets one line per study and per problem
    root = Path(args.root)
    log_path = (root / specs[0].name / night / "run.log" if len(specs) == 1
                else root / f"nightly-{night}.log")
    _RUN["log"] = log_path
    debug = bool(getattr(args, "debug", False))
    _RUN["debug"] = debug
    with embedded_server() as server:  # a given PREFECT_API_URL that is down: its one line
        _say_store(args)
        if user_level is None:
            os.environ["PREFECT_LOGGING_LEVEL"] = specs[0].execution.log_level.upper()
        if server is not None:
            os.environ["ASSAY_EMBEDDED_API"] = "1"
        try:
            from assay.flows.nightly import NightlyRegression, nightly
            from assay.flows.study import _quiet_local, capture_logs, prewarm

            with capture_logs(log_path, echo=debug):
                if server is not None:
                    prewarm()
                    server.wait()
                ctx = _quiet_local() if server is not None else contextlib.nullcontext()
                with ctx:
                    # a sync flow returns its State (prefect's overloads read the flow's Any
                    # return as a coroutine's and type the call as an awaitable)
                    state: Any = nightly(specs=[str(p) for p in args.spec], root=args.root,
                                         night=night, store_root=store, overrides=overrides,
                                         return_state=True)
        finally:
            os.environ.pop("ASSAY_EMBEDDED_API", None)
    global _EMBEDDED_RUN_DONE
    _EMBEDDED_RUN_DONE = server is not None
    result = state.result(raise_on_failure=False)
    if isinstance(result, NightlyRegression):
        summary = result.summary
    elif isinstance(result, BaseException):
        raise result
    else:
        summary = result
    for name, st in summary["studies"].items():
        if st.get("generation"):
            print(f"{name}: {st['generation']}", file=sys.stderr)
        if st.get("new_history"):
            print(f"{name}: {st['new_history']}", file=sys.stderr)
        for src, changes in st.get("model_changes", {}).items():
            print(f"{name}/{src}: under test since {st['baseline'].get(src)}: {'; '.join(changes)}",
                  file=sys.stderr)
        if st["regressions"]:
            print(f"{name}: REGRESSION on night {night} (gated metric worse than its baseline "
                  "night):", file=sys.stderr)
            for line in st["lines"]:
                print(f"  {line}", file=sys.stderr)
            print(f"  report: {st['output']}/nightly.md", file=sys.stderr)
        elif not st.get("partial"):
            base = (", ".join(f"{src} vs {b}" for src, b in st["baseline"].items() if b)
                    or "first night")
            print(f"{name}: no gated regression ({base}); {st['output']}/nightly.md")
        if st.get("partial"):
            print(f"{name}: PARTIAL night {night} (failed samples or nothing judged: not a "
                  "pass):", file=sys.stderr)
            for line in st["partial"]:
                print(f"  {line}", file=sys.stderr)
            print(f"  report: {st['output']}/nightly.md", file=sys.stderr)
    for target in summary.get("alerts", []):
        print(f"alert sent to {target}", file=sys.stderr)
    for target in summary.get("alerts_already_sent", []):
        print(f"alert to {target} not sent again: this night's verdict was already announced",
              file=sys.stderr)
    for why in summary.get("alerts_failed", []):
        print(f"alert NOT delivered: {why} (details in {log_path})", file=sys.stderr)
    if summary["regressions"]:
        return 3
    return EXIT_PARTIAL if summary.get("partial") else EXIT_OK


def cmd_history(args: argparse.Namespace) -> int:
    from assay.nightly.history import write_history

    text, rows = write_history(args.dir, last=args.last)
    print(text)
    print(f"wrote {Path(args.dir) / 'history.json'} and history.png "
          f"({len({r['night'] for r in rows})} nights)", file=sys.stderr)
    return 0


#: ``--store``/``--prefect-home`` of ``run`` and ``nightly`` (the rule: ``store_url.locate``).
STORE_HELP = ("content store root, a folder or a URL (default: $ASSAY_STORE, else a .assay folder "
              "in the spec's folder or above, else ~/.cache/assay/store; printed as `store:`)")
PREFECT_HOME_HELP = ("PREFECT_HOME for the embedded server (default: .prefect beside the "
                     "project's .assay, else ~/.cache/assay/prefect)")


def cmd_store(args: argparse.Namespace) -> int:
    import json

    from assay import upkeep
    from assay.store import Store
    from assay.store_url import locate

    # the store a run of a spec in this folder would use (no spec here: walk up from cwd)
    given_by = getattr(args, "store_given_by", "--store")
    store = Store(locate(args.store, ["."], given_by=given_by).store)
    if not store.exists():
        _err(f"{store.location}: no store there (give --store DIR or URL, or set ASSAY_STORE)")
        return 2
    runs = upkeep.find_runs(args.runs) if args.runs else []
    res: upkeep.Usage | upkeep.Verification | upkeep.Collection
    if args.action == "du":
        res = upkeep.du(store, runs)
    elif args.action == "verify":
        res = upkeep.verify(store)
    else:
        if not args.runs:
            _err("store gc needs --runs DIR (the run directories whose entries to keep)")
            return 2
        res = upkeep.gc(store, runs, keep_nights=args.keep_nights, older_than_days=args.older_than,
                        grace=args.grace, wait=args.wait, dry_run=args.dry_run)
    print(json.dumps(res.to_dict(), indent=2, sort_keys=True) if args.json else res.table())
    return 3 if isinstance(res, upkeep.Verification) and res.corrupt else 0


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return n


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assay",
                                description="LLM-evaluation and reward-model studies.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a study spec (no Prefect)")
    v.add_argument("spec")
    v.add_argument("--no-files", action="store_true",
                   help="skip the files it names (their presence and every record in them)")
    add_override_flags(v)
    v.set_defaults(func=cmd_validate)
    r = sub.add_parser("run", help="run a study spec as a Prefect flow")
    r.add_argument("spec")
    r.add_argument("--output", "-o",
                   help="run directory (default: the spec's output, or runs/<name>)")
    r.add_argument("--store", help=STORE_HELP)
    r.add_argument("--prefect-home", help=PREFECT_HOME_HELP)
    r.add_argument("--debug", action="store_true",
                   help="print Prefect's log and any traceback here too (always in OUTPUT/run.log)")
    r.add_argument("--no-view", action="store_true",
                   help="do not write OUTPUT/view/ (the sample viewer; also execution.view: false)")
    add_override_flags(r)
    r.add_argument("--no-fast-path", action="store_true",
                   help="run the Prefect flow even when every stage is cached (records a flow run)")
    r.add_argument("--max-parallel", type=_positive, metavar="N",
                   help="stage nodes in flight at once (default: execution.max_parallel, or 8)")
    r.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="print the report of a finished run (no Prefect)")
    rep.add_argument("run_dir")
    rep.add_argument("--json", action="store_true", help="print report.json instead")
    rep.set_defaults(func=cmd_report)
    vw = sub.add_parser("view", help="write RUN/view/index.html: the run's tasks, samples, "
                        "verdicts and what changed since another run (no Prefect)")
    vw.add_argument("run_dir",
                    help="a run directory, or a nightly root for one study (its newest night)")
    vw.add_argument("--against", metavar="OTHER_RUN",
                    help="compare with this run, or with the night of this date YYYY-MM-DD of "
                    "the same study (a night: default its baseline)")
    vw.add_argument("--serve", action="store_true",
                    help="then serve the page on 127.0.0.1 until Ctrl-C")
    vw.add_argument("--port", type=int, default=0, help="--serve: port (default: any free one)")
    vw.set_defaults(func=cmd_view)
    s = sub.add_parser("schema", help="print or write the spec JSON Schema")
    s.add_argument("--output", help="write to this file (configs/schema.json)")
    s.add_argument("--check", metavar="FILE", help="exit 1 when FILE differs from the schema")
    s.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE first so the kinds it registers are in the schema "
                        "(repeatable)")
    s.add_argument("spec", nargs="?", help="include the kinds this spec's plugins: register")
    s.set_defaults(func=cmd_schema)
    n = sub.add_parser("nightly", help="run specs as tonight's nightly flow and gate regressions "
                       "(exit 3 when a gated metric regressed, 4 when samples failed)")
    n.add_argument("spec", nargs="+")
    n.add_argument("--night", help="the night's date YYYY-MM-DD: a backfill or a rerun of that "
                   "night (default: today in nightly.timezone, else local time)")
    n.add_argument("--root", default="runs/nightly", help="nightly root (default runs/nightly)")
    n.add_argument("--store", help=STORE_HELP)
    n.add_argument("--prefect-home", help=PREFECT_HOME_HELP)
    n.add_argument("--debug", action="store_true",
                   help="print Prefect's log here too (always in the night's run.log)")
    add_override_flags(n)
    n.set_defaults(func=cmd_nightly)
    h = sub.add_parser("history", help="every night of one study: table, history.json, history.png")
    h.add_argument("dir", help="a nightly root for one study (<root>/<study name>)")
    h.add_argument("--last", type=int, help="only the last N nights")
    h.set_defaults(func=cmd_history)
    st = sub.add_parser("store", help="store upkeep: du, verify, gc (no Prefect)")
    st.add_argument("action", choices=["du", "verify", "gc"])
    st.add_argument("--store", help="content store root (default: $ASSAY_STORE, else a .assay "
                    "folder here or above, else ~/.cache/assay/store: where `assay run` looks)")
    st.add_argument("--runs", nargs="+", help="folders holding run directories (gc: required)")
    st.add_argument("--keep-nights", type=int, help="gc: keep the newest N runs of each folder")
    st.add_argument("--older-than", type=float, metavar="DAYS",
                    help="gc: drop runs started more than DAYS ago")
    st.add_argument("--grace", type=float, default=3600.0,
                    help="gc: never remove files younger than this many seconds (default 3600)")
    st.add_argument("--wait", type=float, default=0.0,
                    help="gc: seconds to wait for running studies to finish (default 0: fail)")
    st.add_argument("--dry-run", action="store_true", help="gc: report, remove nothing")
    st.add_argument("--json", action="store_true", help="print JSON instead of a table")
    st.set_defaults(func=cmd_store)
    return p


class Terminated(KeyboardInterrupt):
    """SIGTERM during ``run``/``nightly``: unwinds like Ctrl-C (stages stop their workers and
    sandboxes on the way out), then exit 143."""


#: The signal that interrupted this run, as the reason :func:`_interrupted` reports: recorded
#: the moment it arrives, since its KeyboardInterrupt may surface wrapped in another library's
#: error (pydantic's serializer, for one) or second to a node's cancellation.
_SIGNALLED: list[str] = []


#: Set by the signal handlers; a relay thread then stops the work on every thread
#: (:mod:`assay.stop`), since the handler's exception can be swallowed where the main thread is
#: (a C extension's callback prints "Exception ignored" and goes on).
_SIGNAL_EVENT = threading.Event()


def _start_signal_relay() -> None:
    def relay() -> None:
        _SIGNAL_EVENT.wait()  # woken by a handler; a daemon thread: never joined
        from assay import stop

        stop.trigger(_SIGNALLED[0] if _SIGNALLED else "interrupted")

    threading.Thread(target=relay, name="assay-signal-relay", daemon=True).start()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends us at once
    _SIGNALLED.append("terminated (SIGTERM)")
    _SIGNAL_EVENT.set()
    raise Terminated()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _SIGNALLED.append("interrupted")
    _SIGNAL_EVENT.set()
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``assay`` console script; returns the exit status.

    2: an error in the input (one ``error:`` line saying where and how to fix it); 1: an
    unexpected exception (its stage and the log file holding the traceback); 5: stopped by
    execution.deadline or stall_after; 130: interrupted (Ctrl-C); 143: terminated (SIGTERM).
    """
    args = build_parser().parse_args(argv)
    _RUN.clear()
    try:
        _parse_store_args(args)
    except AssayError as e:
        _err(str(e))
        return 2
    term = intr = None
    ticker: contextlib.AbstractContextManager[object] = contextlib.nullcontext()
    if args.func in (cmd_run, cmd_nightly):
        import signal
        import threading

        from assay.outstreams import guard_output
        from assay.progressbar import printing

        # a reader that goes away (a closed pipe, a killed worker) drops lines, not the study
        guard_output()
        if threading.current_thread() is threading.main_thread():
            term = signal.signal(signal.SIGTERM, _on_sigterm)
            intr = signal.signal(signal.SIGINT, _on_sigint)
            _start_signal_relay()
        ticker = printing(sys.stderr)  # long shards: a bar (TTY) or a line every 5 s
    try:
        with ticker:
            rc = args.func(args)
        if _SIGNALLED:  # the handler's exception was swallowed on its way: the signal stands
            return _interrupted(_SIGNALLED[0])
        return rc  # type: ignore[no-any-return]
    except (Terminated, KeyboardInterrupt) as e:
        return _interrupted("terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted")
    except RunStopped as e:  # the deadline or the stall detector: one line, its own status
        stage = getattr(e, "assay_stage", None) or "the study flow"
        _err(f"{stage}: {e}; what was committed is kept: rerun the same command to resume")
        return EXIT_STOPPED
    except AssayError as e:
        if not getattr(e, "internal", False):
            if _RUN.get("debug"):
                traceback.print_exc()
            _err(str(e))
            return int(getattr(e, "exit_status", 2))  # 1: an outage, e.g. no Prefect API
        rc = _internal_failure(e)
        if rc is None:
            raise
        return rc
    except Exception as e:
        if _SIGNALLED:  # the signal's KeyboardInterrupt, wrapped by a library on its way up
            return _interrupted(_SIGNALLED[0])
        rc = _internal_failure(e)
        if rc is None:
            raise
        return rc
    except BaseException as e:
        # SIGTERM while a Prefect flow runs: Prefect's handler raises its TerminationSignal
        if type(e).__name__ != "TerminationSignal":
            raise
        return _interrupted("terminated (SIGTERM)")
    finally:
        if term is not None:
            import signal

            signal.signal(signal.SIGTERM, term)
            signal.signal(signal.SIGINT, intr)


def _parse_store_args(args: argparse.Namespace) -> None:
    """Every command with ``--store`` reads it (or ``ASSAY_STORE``) through one parser: a URL
    stays a URL, a path becomes absolute, anything else is an input error naming the flag."""
    if hasattr(args, "store"):
        from assay.store_url import ENV, store_from

        args.store_given_by = "--store" if args.store is not None else ENV
        args.store = store_from(args.store)


def _locate(args: argparse.Namespace, specs: Sequence[str]) -> Path:
    """Choose the run's store (``args.store``, its line ``args.store_line``) and Prefect home
    (returned) from the specs' folder (:func:`assay.store_url.locate`)."""
    from assay.store_url import locate

    loc = locate(args.store, [Path(specs[0]).parent] if specs else [],
                 given_by=getattr(args, "store_given_by", "--store"),
                 prefect_home=args.prefect_home)
    args.store, args.store_line = loc.store, loc.line()
    return loc.prefect_home


def _say_store(args: argparse.Namespace) -> None:
    """Print the ``store:`` line once, when the work starts: after the input checks, so a bad
    spec still answers with its one ``error:`` line."""
    if not _RUN.get("store_said"):
        _RUN["store_said"] = True
        print(args.store_line, file=sys.stderr, flush=True)


def _internal_failure(e: BaseException) -> int | None:
    """Exit 1 for a failure that is not the user's input, naming the stage and the log; None
    outside a run (no log file to point to: the caller lets the traceback through)."""
    log = _RUN.get("log")
    if log is None:
        return None
    if _RUN.get("debug"):
        traceback.print_exc()
    stage = getattr(e, "assay_stage", None) or "the study flow"
    first = (str(e).strip().splitlines() or [""])[0][:300]
    _err(f"{stage} failed: {type(e).__name__}: {first} (not an input assay checks: the "
         f"traceback is in {log}; `assay run --debug` prints it here)")
    return 1


def _interrupted(reason: str) -> int:
    """Ctrl-C or SIGTERM reached :func:`main`: stop whatever still runs (a head start's graph,
    requests in flight: :mod:`assay.stop`), print the one line, return the status."""
    from assay import stop

    recorded = stop.stopped()
    if _SIGNALLED:
        reason = _SIGNALLED[0]
    elif recorded is not None and recorded.startswith("stopped by execution."):
        # a watchdog's stop can reach this thread as a node's cancellation (a
        # KeyboardInterrupt) before its own signal does
        reason = recorded
    stop.trigger(reason)
    line, rc = _stop_line(reason)
    _err(line)
    return rc


#: Seconds a stopped run may take to unwind before the process leaves anyway: every wait a
#: stage makes is woken by the stop (assay.stop), so this only ends a run whose plugin code
#: blocks where nothing reaches it, or whose Prefect API does not answer the final state.
#: ``ASSAY_STOP_BACKSTOP_S`` sets another value.
STOP_BACKSTOP_S = 10.0


def stop_backstop_s() -> float:
    """:data:`STOP_BACKSTOP_S`, or the positive number of seconds ``ASSAY_STOP_BACKSTOP_S``
    gives (a value that is not one is named, and the default kept: the stop must still end
    the run)."""
    text = os.environ.get("ASSAY_STOP_BACKSTOP_S")
    if not text:
        return STOP_BACKSTOP_S
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        print(f"warning: ASSAY_STOP_BACKSTOP_S={text!r} is not a positive number of seconds; "
              f"using {STOP_BACKSTOP_S:g}", file=sys.stderr, flush=True)
        return STOP_BACKSTOP_S
    return value

_MAIN_DONE: list[bool] = []


def _stop_line(reason: str) -> tuple[str, int]:
    """The ``error:`` line and exit status of a run stopped for ``reason`` (as
    :func:`assay.stop.trigger` recorded it), the ones :func:`main` prints and returns."""
    if reason.startswith("terminated"):
        return ("terminated (SIGTERM); rerun the same command to resume from the cached "
                "stages"), 128 + 15
    if reason.startswith("stopped by execution."):
        from assay.watchdog import stopped_where

        where = stopped_where(reason)  # the same line whichever thread saw the stop first
        return (f"{where + ': ' if where else ''}{reason}; what was committed is kept: rerun "
                "the same command to resume", EXIT_STOPPED)
    return "interrupted; rerun the same command to resume from the cached stages", EXIT_INTERRUPTED


def _arm_backstop() -> None:
    """At a stop: if the run has not unwound :func:`stop_backstop_s` later, print its one
    ``error:`` line and leave (children reaped): a stop always ends the process on time."""
    import threading

    from assay import stop

    wait_s = stop_backstop_s()

    def leave() -> None:
        time.sleep(wait_s)
        if _MAIN_DONE:
            return
        line, rc = _stop_line(stop.stopped() or "interrupted")
        from assay.reaper import kill_descendants

        with contextlib.suppress(Exception):
            kill_descendants()
        print(f"error: {line} (the run did not unwind within {wait_s:g} s; exiting)",
              file=sys.stderr, flush=True)
        os._exit(rc)

    threading.Thread(target=leave, name="assay-stop-backstop", daemon=True).start()


def console() -> None:
    """The ``assay`` console script: :func:`main`, then exit.

    After a run on the embedded server, every output is written and the server is gone, so the
    process leaves with ``os._exit``: tearing down Prefect's threads and ~100 MB of modules
    takes about half a second of a cached rerun and does nothing a user needs. A run that
    failed, was stopped or found a problem (status not 0) leaves the same way once Prefect's
    logs are sent: the threads a stop abandoned are not waited for. With a real server
    (``PREFECT_API_URL``) a successful run exits normally, so Prefect flushes its events too.
    At a stop, :func:`_arm_backstop` bounds how long the run may take to unwind.
    """
    from assay import stop

    stop.always(_arm_backstop)
    try:
        rc = main()
        _MAIN_DONE.append(True)
        sys.stdout.flush()
    except BrokenPipeError:
        # the reader went away (`assay validate ... | head`): no traceback, and none at exit
        # when Python flushes stdout again; the status a shell gives a command killed by SIGPIPE
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = EXIT_BROKEN_PIPE
    if rc != 0 or _EMBEDDED_RUN_DONE:
        # finished on the embedded server (stopped either way), or failed, stopped or
        # interrupted: threads a stop abandoned, or a head start's still waiting on a server,
        # would be joined at interpreter exit (concurrent.futures does), so leave without them
        grading = sys.modules.get("assay.grading")
        if grading is not None:  # stop warm grading workers and sandboxes (atexit will not run)
            grading.shutdown_workers()
        if rc != 0:  # anything an interrupted stage started and did not stop
            from assay.reaper import kill_descendants

            kill_descendants()
        if not _EMBEDDED_RUN_DONE:
            _flush_prefect_logs()  # a real server gets the run's last log records
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


def _flush_prefect_logs() -> None:
    """Send Prefect's buffered log records to its server, when a run imported Prefect."""
    if "prefect" not in sys.modules:
        return
    from assay.flows.embedded import flush_prefect_logs

    flush_prefect_logs()


if __name__ == "__main__":
    console()
