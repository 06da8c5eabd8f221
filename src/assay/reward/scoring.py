"""score_view: score every response of every item of a DataView, cached in the content store.

One table row per scored response, keyed by the item's content hash; the cache key chains the
model fingerprint, the view checksum and the scoring protocol version.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from assay.data.items import Pair, Quadruple, Tournament
from assay.errors import DataError
from assay.hashing import combine
from assay.reward.base import PROTOCOL_VERSION, RewardModel, RewardModelError, check_scores
from assay.store import Store

if TYPE_CHECKING:
    from assay.data.view import DataView

SCORE_SCHEMA = pa.schema([
    ("item_index", pa.int64()),
    ("item_hash", pa.string()),
    ("kind", pa.string()),
    ("seed_id", pa.string()),
    ("axis", pa.string()),
    ("slot", pa.string()),
    ("response_chars", pa.int64()),
    ("score", pa.float64()),
])


def score_key(model: RewardModel, view: DataView) -> str:
    """The cache key of ``score_view(model, view)``: model fingerprint, view checksum, protocol.

    Example:
        >>> from assay.data import DataView, make_pair
        >>> from assay.reward import FunctionRewardModel
        >>> v = DataView([make_pair("Q", "a", "b", "x", seed_id="s", builder_id="h")])
        >>> m = FunctionRewardModel(lambda p, r: 0.0, name="zero", version="1")
        >>> score_key(m, v)[:6]
        'score:'
    """
    return combine("score", model.fingerprint, view.checksum(), PROTOCOL_VERSION)


def view_inputs(view: DataView) -> tuple[list[str], list[str], dict[str, list[object]]]:
    """Flatten a view into (prompts, responses, row columns): both sides of every Pair, the
    four cells of a Quadruple (each with the prompt its cell answers), every response of a
    Tournament. A Trajectory has no (prompt, response) to score and is an error."""
    prompts: list[str] = []
    responses: list[str] = []
    cols: dict[str, list[object]] = {k: [] for k in
                                  ("item_index", "item_hash", "kind", "seed_id", "axis", "slot")}

    def add(i: int, item: Pair | Quadruple | Tournament, slot: str, prompt: str, text: str,
            axis: str | None) -> None:
        prompts.append(prompt)
        responses.append(text)
        cols["item_index"].append(i)
        cols["item_hash"].append(item.content_hash)
        cols["kind"].append(item.kind)
        cols["seed_id"].append(item.seed_id)
        cols["axis"].append(axis)
        cols["slot"].append(slot)

    for i, item in enumerate(view):
        if isinstance(item, Pair):
            add(i, item, "chosen", item.prompt_text, item.chosen.text, item.axis)
            add(i, item, "rejected", item.prompt_text, item.rejected.text, item.axis)
        elif isinstance(item, Quadruple):
            for key, resp in item.cells.items():
                add(i, item, f"{key[0]}|{key[1]}", item.prompt_for(key), resp.text, None)
        elif isinstance(item, Tournament):
            for j, resp in enumerate(item.responses):
                add(i, item, str(j), item.prompt_text, resp.text, None)
        else:
            raise DataError(
                f"score_view: item {i} is a {item.kind or type(item).__name__}; a reward model "
                "scores Pair, Quadruple and Tournament items (filter trajectories out of the view "
                "first)")
    return prompts, responses, cols


def score_view(model: RewardModel, view: DataView, *,
               store: Store | str | os.PathLike[str] | None = None, cache: bool = True,
               refresh: bool = False) -> pa.Table:
    """Score both sides of every pair (all cells of a Quadruple, all responses of a Tournament).

    Returns an Arrow table (schema ``SCORE_SCHEMA``): one row per response with the item's index,
    content hash, kind, seed, axis, slot (``chosen``/``rejected``, ``level_a|level_b``, or the
    response index) and the score. Cached in ``store`` (default ``$ASSAY_STORE`` or ``./.assay``)
    under :func:`score_key`; a second call reads the table and runs no model. ``refresh=True``
    recomputes; ``cache=False`` neither reads nor writes the store. The table's metadata holds
    the model fingerprint, the view checksum and the run record (truncations, batches).

    Example:
        >>> import tempfile
        >>> from assay.data import DataView, make_pair
        >>> from assay.reward import FunctionRewardModel
        >>> v = DataView([make_pair("Q", "long answer", "short", "x", seed_id="s", builder_id="h")])
        >>> m = FunctionRewardModel(lambda p, r: float(len(r)), name="len", version="1")
        >>> t = score_view(m, v, store=tempfile.mkdtemp())
        >>> t.column("slot").to_pylist(), t.column("score").to_pylist()
        (['chosen', 'rejected'], [11.0, 5.0])
    """
    if not isinstance(model, RewardModel):
        raise RewardModelError(
            f"score_view needs a reward model (score(prompts, responses), fingerprint, "
            f"last_run), got {type(model).__name__}")
    if not hasattr(view, "checksum"):
        raise DataError(f"score_view needs a DataView (with checksum()), got {type(view).__name__}")
    st = None
    if cache:
        st = store if isinstance(store, Store) else Store(store)
    key = score_key(model, view)
    if st is not None and not refresh:
        ref = st.get_ref(key)
        if ref is not None:
            table = st.get_table(ref["blob"])
            if table is not None:
                return table
    prompts, responses, cols = view_inputs(view)
    scores = check_scores(model.score(prompts, responses), len(prompts), model.name) \
        if prompts else np.zeros(0)
    run = model.last_run
    arrays: dict[str, object] = {k: v for k, v in cols.items()}
    arrays["response_chars"] = [len(r) for r in responses]
    arrays["score"] = scores
    meta = {
        "assay.score_key": key, "assay.model": model.fingerprint, "assay.model_name": model.name,
        "assay.view": view.checksum(), "assay.protocol": str(PROTOCOL_VERSION),
        "assay.truncated": str(run.truncated if run is not None and prompts else 0),
    }
    table = pa.table(arrays, schema=SCORE_SCHEMA).replace_schema_metadata(meta)
    if st is not None:
        blob = st.put_table(table)
        st.set_ref(key, blob,
                   {"model": model.name, "run": run.to_dict() if run and prompts else {}})
        # Read back what the store holds, so a cached and a fresh call return equal tables.
        stored = st.get_table(blob)
        if stored is not None:
            table = stored
    return table
