"""A study whose S3 store freezes mid-run (SeaweedFS stopped with SIGSTOP while its generate
shards ask a loopback model): the run ends at the store's bound with an outage naming the store,
and after that first failure no model request is sent (issue 47, item 2)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from assay import stages, store
from assay.errors import StoreIOError
from assay.spec import load_spec
from assay.store import Store
from tests.helpers.openai_server import OpenAIServer
from tests.helpers.seaweed import S3Server

SPEC = """
name: frozen
sources:
  - name: served
    kind: file
    path: sums.jsonl
    fields: {prompt: q, reference: gold, task_id: id}
    generate:
      model: {kind: openai, base_url: "BASE", model: m}
      max_connections: 2
      api: completions
      k: 1
      params: {temperature: 0.0, max_tokens: 16}
    verifier: {kind: numeric}
measure: {pass_at: {k: 1}}
execution: {shard_rows: 4, max_parallel: 2}
"""


def test_a_frozen_store_ends_the_run_and_no_request_follows_its_first_failure(
        s3: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PUT_WAIT_S", 2.0)
    server = OpenAIServer(["m"], latency=0.02).start()
    frozen: list[int] = []

    def freeze(n: int, body: dict) -> None:  # type: ignore[type-arg]
        # the 10th completion request stops the store's server (a hung host, a paused VM):
        # every request to it from then on goes unanswered
        if n == 10 and not frozen:
            os.killpg(s3.proc.pid, signal.SIGSTOP)
            frozen.append(n)
        return None

    server.faults = freeze
    at_failure: list[int] = []
    real_fail = store._Behind._fail

    def spy(self: store._Behind, err: BaseException) -> None:
        if self.scopes and self.failed is None:
            at_failure.append(server.count())  # requests the server had got by then
        real_fail(self, err)

    monkeypatch.setattr(store._Behind, "_fail", spy)
    (tmp_path / "sums.jsonl").write_text("".join(
        json.dumps({"id": f"t{i}", "q": f"What is {i} + {i}?", "gold": str(2 * i)}) + "\n"
        for i in range(40)))
    (tmp_path / "s.yaml").write_text(SPEC.replace("BASE", server.base_url))
    st = Store(s3.url("frozen-run"))
    try:
        with pytest.raises(StoreIOError) as caught:
            with st.in_use(write_behind=True):  # as the flow holds it
                stages.run_study(load_spec(tmp_path / "s.yaml"), st, progress=None)
        assert frozen, "the store never froze: the test proves nothing"
        assert caught.value.internal and st.location in str(caught.value)  # exit 1, naming it
        assert at_failure, "no store failure was recorded"
        after = server.settle() - at_failure[0]
        # nothing was sent after the store's first failure (requests still on their way to
        # the server then would count here: there are none, every lane waits on the store)
        assert after == 0, f"{after} model requests after the store failed"
        assert server.count() < 40  # the run did not go on through the other shards
    finally:
        os.killpg(s3.proc.pid, signal.SIGCONT)
        server.stop()
