"""The store upkeep flow: verify the store, then gc what no kept nightly run references.

Deployed weekly by deployments/prefect.yaml; ``assay store verify|gc`` does the same by hand.
"""

from __future__ import annotations

from typing import Any

from prefect import flow

from assay import upkeep
from assay.store import Store
from assay.store_url import store_from


@flow(name="assay-store-upkeep", persist_result=False, log_prints=True)
def store_upkeep(runs: list[str], keep_nights: int = 30, store_root: str | None = None,
                 grace: float = 3600.0, wait: float = 600.0) -> dict[str, Any]:
    """Quarantine corrupt entries, then keep the newest ``keep_nights`` runs of each folder
    under ``runs`` and what they reference; waits up to ``wait`` s for running studies."""
    store = Store(store_from(store_root, field="store_root"))  # the CLI's one parser
    checked = upkeep.verify(store)
    print(checked.table())
    res = upkeep.gc(store, upkeep.find_runs(runs), keep_nights=keep_nights, grace=grace, wait=wait)
    print(res.table())
    return {"verify": checked.to_dict(), "gc": res.to_dict()}
