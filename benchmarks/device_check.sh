#!/usr/bin/env bash
# The device check on a CUDA machine with no network (benchmarks/README.md, "Device check"):
# installs dist/device's wheels into a folder of their own, then runs device_check.py on this tree.
#   bash benchmarks/device_check.sh            # writes $OUT/device_check.json (or ./ without OUT)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
SITE=${DEVICE_SITE:-/tmp/assay-device-site}
if ! ls dist/device/*.whl >/dev/null 2>&1 || [ ! -f dist/device/minilm-int8/TRAVEL.json ]; then
    echo "error: dist/device holds no wheels or no minilm-int8; run 'make device-wheels' where" \
         "pip reaches an index, and carry dist/device" >&2
    exit 2
fi
# --no-deps: the device already has torch, transformers, numpy, ...; --no-index: no network there
"$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" dist/device/*.whl
# assay itself comes from this tree's src/ (what travelled is what is checked), the wheels next
export PYTHONPATH="$PWD/src:$SITE" HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
exec "$PY" benchmarks/device_check.py --minilm dist/device/minilm-int8 \
    --out "${OUT:-.}/device_check.json" "$@"
