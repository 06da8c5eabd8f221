"""``python -m assay.reward``: audit a reward model on the built-in diagnostic set and print it.

Default model: the bundled all-MiniLM-L6-v2 (offline); ``--hf PATH`` audits a transformers model.
"""

from __future__ import annotations

import argparse
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m assay.reward", description=__doc__.splitlines()[0])
    ap.add_argument("--hf", default=None,
                    help="local path or hub id of a sequence-classification RM")
    ap.add_argument("--out", default=None,
                    help="directory for reward_audit.md and reward_audit.png")
    ap.add_argument("--store", default=None,
                    help="content store root (default $ASSAY_STORE or ./.assay)")
    ap.add_argument("--no-cache", action="store_true", help="do not read or write the score cache")
    ap.add_argument("--dimensions", default=None,
                    help="comma-separated subset of the diagnostic dimensions (default: all 14)")
    args = ap.parse_args(argv)

    from assay.errors import DataError
    from assay.reward import EmbeddingRewardModel, HFRewardModel, audit
    from assay.reward.auditing import default_views

    views = default_views()
    if args.dimensions:
        wanted = [d.strip() for d in args.dimensions.split(",") if d.strip()]
        unknown = sorted(set(wanted) - set(views))
        if unknown:
            raise DataError(f"--dimensions: unknown {unknown}; choose from {sorted(views)}")
        views = {d: views[d] for d in wanted}
    t = time.perf_counter()
    model = HFRewardModel(args.hf) if args.hf else EmbeddingRewardModel()
    res = audit(model, views, store=args.store, cache=not args.no_cache)
    print(res.report())
    if args.out:
        paths = res.save(args.out)
        print(f"wrote {paths['markdown']} and {paths['png']}")
    print(f"done in {time.perf_counter() - t:.1f}s (model load included)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
