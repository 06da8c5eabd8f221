"""The ``assay`` command: validate a spec, run a study, reprint a report, export the schema.

``validate``, ``report`` and ``schema`` never import Prefect; ``run`` imports it lazily.

Example:
    >>> main(["validate", "no/such/spec.yaml"])
    2
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

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
        _err(f"{args.spec} has {len(problems)} problem(s):\n  " + "\n  ".join(problems))
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

    if args.json:
        p = Path(args.run_dir) / "report.json"
        if not p.is_file():
            _err(f"{p} not found: {args.run_dir} is not a finished run directory")
            return 2
        sys.stdout.write(p.read_text(encoding="utf-8"))
        return 0
    sys.stdout.write(read_report(args.run_dir))
    return 0


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


def cmd_run(args: argparse.Namespace) -> int:
    from assay.spec import check_files, load_spec
    from flows.embedded import apply_local_settings, embedded_server, require_real_server

    t0 = time.perf_counter()
    user_level = os.environ.get("PREFECT_LOGGING_LEVEL")
    apply_local_settings(Path(args.prefect_home or ".prefect").resolve())
    if args.store:
        os.environ["ASSAY_STORE"] = str(Path(args.store).resolve())
    # The embedded server is launched first: its start-up overlaps loading the spec and
    # importing Prefect here. A bad spec stops it again before Prefect is imported.
    with embedded_server() as server:
        spec = load_spec(args.spec)
        problems = check_files(spec)
        if problems:
            _err(f"{args.spec}: " + "; ".join(problems))
            return 2
        require_real_server(spec.execution.runner, embedded=server is not None)
        if user_level is None:
            os.environ["PREFECT_LOGGING_LEVEL"] = spec.execution.log_level.upper()
        if server is not None:
            os.environ["ASSAY_EMBEDDED_API"] = "1"
            print(f"[prefect] embedded API server on {server.api_url} "
                  f"(PREFECT_HOME={os.environ['PREFECT_HOME']})", file=sys.stderr, flush=True)
        try:
            from flows.study import prewarm, run_spec  # Prefect imports while the server starts

            if server is not None:
                prewarm()
                server.wait()
            result = run_spec(args.spec, args.output, args.store, embedded=server is not None)
        finally:
            os.environ.pop("ASSAY_EMBEDDED_API", None)
    print(f"done in {time.perf_counter() - t0:.1f} s: {len(result['cached'])} stage(s) cached, "
          f"{len(result['computed'])} computed; report in {result['output']}/report.md",
          file=sys.stderr)
    global _EMBEDDED_RUN_DONE
    _EMBEDDED_RUN_DONE = server is not None
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="assay", description="LLM-evaluation and reward-model studies.")
    sub = p.add_subparsers(dest="command", required=True)
    v = sub.add_parser("validate", help="check a study spec (no Prefect)")
    v.add_argument("spec")
    v.add_argument("--no-files", action="store_true", help="skip checking the files it names")
    v.set_defaults(func=cmd_validate)
    r = sub.add_parser("run", help="run a study spec as a Prefect flow")
    r.add_argument("spec")
    r.add_argument("--output", "-o", help="run directory (default: the spec's output, or runs/<name>)")
    r.add_argument("--store", help="content store root (default: $ASSAY_STORE or ./.assay)")
    r.add_argument("--prefect-home", help="PREFECT_HOME for the embedded server (default ./.prefect)")
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
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``assay`` console script; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except AssayError as e:
        _err(str(e))
        return 2
    except KeyboardInterrupt:
        _err("interrupted; rerun the same command to resume from the cached stages")
        return 130


def console() -> None:
    """The ``assay`` console script: :func:`main`, then exit.

    After a run on the embedded server, every output is written and the server is gone, so the
    process leaves with ``os._exit``: tearing down Prefect's threads and ~100 MB of modules
    takes about half a second of a cached rerun and does nothing a user needs. With a real
    server (``PREFECT_API_URL``) the normal exit runs, so Prefect flushes its events and logs.
    """
    rc = main()
    if _EMBEDDED_RUN_DONE:
        grading = sys.modules.get("assay.grading")
        if grading is not None:  # stop warm grading workers and sandboxes (atexit will not run)
            grading.shutdown_workers()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    sys.exit(rc)


if __name__ == "__main__":
    console()
