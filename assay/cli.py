"""The ``assay`` command: validate, run, nightly, history, report, schema, store du|verify|gc.

Only ``run`` and ``nightly`` import Prefect (lazily). Exit codes: 0 ok; 1 an unexpected
exception during ``run`` (the stage and OUTPUT/run.log named); 2 a usage, spec or data error;
3 the check found a problem (``nightly``: a gated metric regressed; ``store verify``: a corrupt
entry); 130 interrupted.

Example:
    >>> main(["validate", "no/such/spec.yaml"])
    2
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from assay.errors import AssayError


def _err(msg: str) -> None:
    print(f"error: {msg}", file=sys.stderr)


def cmd_validate(args: argparse.Namespace) -> int:
    from assay.spec import check_data, check_files, load_spec

    spec = load_spec(args.spec)
    problems = [] if args.no_files else check_files(spec)
    warnings: list[str] = []
    if not args.no_files and not problems:  # the files are there: read them
        problems, warnings = check_data(spec)
    for w in warnings:
        print(f"warning: {args.spec}: {w}", file=sys.stderr)
    if problems:
        import yaml

        from assay.spec import locate

        root = yaml.compose(Path(args.spec).read_text(encoding="utf-8"))
        _err(f"{args.spec} has {len(problems)} problem(s):\n  "
             + "\n  ".join(locate(p, root, args.spec) for p in problems))
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
            _err(f"{args.check} is out of date; regenerate with `assay schema --output {args.check}`")
            return 1
        print(f"{args.check}: up to date")
        return 0
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    else:
        sys.stdout.write(text)
    return 0


#: Set by a run that used its own embedded server: the process may then skip interpreter
#: teardown (see :func:`console`).
_EMBEDDED_RUN_DONE = False

#: The current run's log file and whether tracebacks go to the terminal (``--debug``).
_RUN: dict[str, Any] = {}


def cmd_run(args: argparse.Namespace) -> int:
    from assay.spec import check_files, load_spec
    from flows.embedded import apply_local_settings, embedded_server, require_real_server

    global _EMBEDDED_RUN_DONE
    t0 = time.perf_counter()
    user_level = os.environ.get("PREFECT_LOGGING_LEVEL")
    apply_local_settings(Path(args.prefect_home or ".prefect").resolve())
    if args.store:
        os.environ["ASSAY_STORE"] = str(Path(args.store).resolve())
    _RUN["debug"] = bool(args.debug)
    # The embedded server is launched first: its start-up overlaps loading the spec and
    # importing Prefect here. A bad spec stops it again before Prefect is imported.
    with embedded_server() as server:
        spec = load_spec(args.spec)
        problems = check_files(spec)
        if problems:
            _err(f"{args.spec}: " + "; ".join(problems))
            return 2
        require_real_server(spec.execution.runner, embedded=server is not None)
        _RUN["debug"] = debug = bool(args.debug) or spec.execution.log_level == "debug"
        out = spec.output_dir(args.output)
        _RUN["log"] = log_path = out / "run.log"
        if user_level is None:
            os.environ["PREFECT_LOGGING_LEVEL"] = spec.execution.log_level.upper()
        if server is not None:
            os.environ["ASSAY_EMBEDDED_API"] = "1"
            print(f"[prefect] embedded API server on {server.api_url} "
                  f"(PREFECT_HOME={os.environ['PREFECT_HOME']})", file=sys.stderr, flush=True)
        try:
            # Prefect imports while the server starts
            from flows.study import capture_logs, prewarm, run_spec

            # Prefect's records (a failure's come with tracebacks) go to the run's log file;
            # the terminal gets progress and one line per error (see main)
            with capture_logs(log_path, echo=debug):
                try:
                    if server is not None:
                        prewarm()
                        server.wait()
                    result = run_spec(args.spec, args.output, args.store, embedded=server is not None)
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
    print(f"done in {time.perf_counter() - t0:.1f} s: {len(result['cached'])} stage(s) cached, "
          f"{len(result['computed'])} computed; report in {result['output']}/report.md",
          file=sys.stderr)
    return 0


def cmd_nightly(args: argparse.Namespace) -> int:
    import datetime as dt

    from assay.spec import check_files, load_spec
    from flows.embedded import apply_local_settings, embedded_server

    if args.night is not None:
        try:
            dt.date.fromisoformat(args.night)
        except ValueError:
            _err(f"--night {args.night!r}: give a date YYYY-MM-DD")
            return 2
    night = args.night or dt.datetime.now(dt.UTC).date().isoformat()
    user_level = os.environ.get("PREFECT_LOGGING_LEVEL")
    apply_local_settings(Path(args.prefect_home or ".prefect").resolve())
    store = str(Path(args.store).resolve()) if args.store else None
    if store:
        os.environ["ASSAY_STORE"] = store
    # Every spec is checked before a server starts: a cron job with a typo fails in a second.
    specs = [load_spec(p) for p in args.spec]
    for path, spec in zip(args.spec, specs):
        problems = check_files(spec)
        if problems:
            _err(f"{path}: " + "; ".join(problems))
            return 2
        if spec.execution.runner != "local" and not os.environ.get("PREFECT_API_URL"):
            _err(f"{path}: execution.runner {spec.execution.runner} needs a real Prefect server "
                 "(set PREFECT_API_URL); without one `assay nightly` runs runner: local only")
            return 2
    with embedded_server() as server:
        if user_level is None:
            os.environ["PREFECT_LOGGING_LEVEL"] = specs[0].execution.log_level.upper()
        if server is not None:
            os.environ["ASSAY_EMBEDDED_API"] = "1"
        try:
            from flows.nightly import NightlyRegression, nightly
            from flows.study import _quiet_local, prewarm

            if server is not None:
                prewarm()
                server.wait()
            ctx = _quiet_local() if server is not None else contextlib.nullcontext()
            with ctx:
                state = nightly(specs=[str(p) for p in args.spec], root=args.root, night=night,
                                store_root=store, return_state=True)
        finally:
            os.environ.pop("ASSAY_EMBEDDED_API", None)
    global _EMBEDDED_RUN_DONE
    _EMBEDDED_RUN_DONE = server is not None
    result = state.result(raise_on_failure=False)
    if isinstance(result, NightlyRegression):
        _err(f"REGRESSION: {result}")
        return 3
    if isinstance(result, BaseException):
        raise result
    for name, st in result["studies"].items():
        base = ", ".join(f"{src} vs {b}" for src, b in st["baseline"].items() if b) or "first night"
        print(f"{name}: no gated regression ({base}); {st['output']}/nightly.md")
    return 0


def cmd_history(args: argparse.Namespace) -> int:
    from assay.nightly.history import write_history

    text, rows = write_history(args.dir, last=args.last)
    print(text)
    print(f"wrote {Path(args.dir) / 'history.json'} and history.png "
          f"({len({r['night'] for r in rows})} nights)", file=sys.stderr)
    return 0


def cmd_store(args: argparse.Namespace) -> int:
    import json

    from assay import upkeep
    from assay.store import Store

    store = Store(args.store)
    if not store.root.is_dir():
        _err(f"{store.root}: no store there (give --store DIR or set ASSAY_STORE)")
        return 2
    runs = upkeep.find_runs(args.runs) if args.runs else []
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
    return 3 if args.action == "verify" and res.corrupt else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assay", description="LLM-evaluation and reward-model studies.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a study spec (no Prefect)")
    v.add_argument("spec")
    v.add_argument("--no-files", action="store_true",
                   help="skip the files it names (their presence and every record in them)")
    v.set_defaults(func=cmd_validate)
    r = sub.add_parser("run", help="run a study spec as a Prefect flow")
    r.add_argument("spec")
    r.add_argument("--output", "-o", help="run directory (default: the spec's output, or runs/<name>)")
    r.add_argument("--store", help="content store root (default: $ASSAY_STORE or ./.assay)")
    r.add_argument("--prefect-home", help="PREFECT_HOME for the embedded server (default ./.prefect)")
    r.add_argument("--debug", action="store_true",
                   help="print Prefect's log and any traceback here too (always in OUTPUT/run.log)")
    r.set_defaults(func=cmd_run)
    rep = sub.add_parser("report", help="print the report of a finished run (no Prefect)")
    rep.add_argument("run_dir")
    rep.add_argument("--json", action="store_true", help="print report.json instead")
    rep.set_defaults(func=cmd_report)
    s = sub.add_parser("schema", help="print or write the spec JSON Schema")
    s.add_argument("--output", help="write to this file (configs/schema.json)")
    s.add_argument("--check", metavar="FILE", help="exit 1 when FILE differs from the schema")
    s.add_argument("--plugin", action="append", metavar="MODULE",
                   help="import MODULE first so the kinds it registers are in the schema (repeatable)")
    s.add_argument("spec", nargs="?", help="include the kinds this spec's plugins: register")
    s.set_defaults(func=cmd_schema)
    n = sub.add_parser("nightly", help="run specs as tonight's nightly flow and gate regressions "
                       "(exit 3 when a gated metric regressed)")
    n.add_argument("spec", nargs="+")
    n.add_argument("--night", help="the night's date YYYY-MM-DD (default: today, UTC)")
    n.add_argument("--root", default="runs/nightly", help="nightly root (default runs/nightly)")
    n.add_argument("--store", help="content store root (default: $ASSAY_STORE or ./.assay)")
    n.add_argument("--prefect-home", help="PREFECT_HOME for the embedded server (default ./.prefect)")
    n.set_defaults(func=cmd_nightly)
    h = sub.add_parser("history", help="every night of one study: table, history.json, history.png")
    h.add_argument("dir", help="a nightly root for one study (<root>/<study name>)")
    h.add_argument("--last", type=int, help="only the last N nights")
    h.set_defaults(func=cmd_history)
    st = sub.add_parser("store", help="store upkeep: du, verify, gc (no Prefect)")
    st.add_argument("action", choices=["du", "verify", "gc"])
    st.add_argument("--store", help="content store root (default: $ASSAY_STORE or ./.assay)")
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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``assay`` console script; returns the exit status.

    2: an error in the input (one ``error:`` line saying where and how to fix it); 1: an
    unexpected exception (its stage and the log file holding the traceback); 130: interrupted.
    """
    from assay.layout import bind_own_packages

    bind_own_packages()  # a user's tasks.py or flows/ beside the spec must not replace ours
    args = build_parser().parse_args(argv)
    _RUN.clear()
    try:
        return args.func(args)
    except KeyboardInterrupt:
        _err("interrupted; rerun the same command to resume from the cached stages")
        return 130
    except AssayError as e:
        if _RUN.get("debug"):
            traceback.print_exc()
        _err(str(e))
        return 2
    except Exception as e:
        log = _RUN.get("log")
        if log is None:  # not inside a run: there is no log file to point to
            raise
        if _RUN.get("debug"):
            traceback.print_exc()
        stage = getattr(e, "assay_stage", None) or "the study flow"
        first = (str(e).strip().splitlines() or [""])[0][:300]
        _err(f"{stage} failed: {type(e).__name__}: {first} (not an input assay checks: the "
             f"traceback is in {log}; `assay run --debug` prints it here)")
        return 1


def console() -> None:
    """The ``assay`` console script: :func:`main`, then exit.

    After a run on the embedded server, every output is written and the server is gone, so the
    process leaves with ``os._exit``: tearing down Prefect's threads and ~100 MB of modules
    takes about half a second of a cached rerun and does nothing a user needs. With a real
    server (``PREFECT_API_URL``) the normal exit runs, so Prefect flushes its events and logs.
    """
    rc = main()
    if _EMBEDDED_RUN_DONE:  # finished, failed or interrupted: the server is stopped either way
        grading = sys.modules.get("assay.grading")
        if grading is not None:  # stop warm grading workers and sandboxes (atexit will not run)
            grading.shutdown_workers()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    console()
