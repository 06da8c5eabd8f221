"""decontaminate(): an `against` JSONL file that starts with a UTF-8 BOM reads like one without.

Windows editors and Excel exports write the BOM; every other data reader accepts it."""

from __future__ import annotations

import json

from assay.decontam import decontaminate

QUESTION = "Cancel order 9911 and refund the card it was paid with, please."


def test_against_file_with_bom_is_read(tmp_path):
    items = [{"prompt": QUESTION}, {"prompt": "Where is order 4473 now?"}]
    body = "".join(json.dumps(it) + "\n" for it in items)
    plain, bom = tmp_path / "plain.jsonl", tmp_path / "bom.jsonl"
    plain.write_text(body, encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + body.encode("utf-8"))
    train = [{"prompt": QUESTION}, {"prompt": "An unrelated training prompt about gardening."}]
    kept_plain, rep_plain = decontaminate(train, against=plain)
    kept_bom, rep_bom = decontaminate(train, against=bom)
    assert [r["prompt"] for r in kept_bom] == [train[1]["prompt"]]
    assert kept_bom == kept_plain
    assert rep_bom.eval_items == rep_plain.eval_items == 2
    assert rep_bom.to_dict() == rep_plain.to_dict()
