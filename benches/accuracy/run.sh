#!/usr/bin/env bash
# The accuracy table of docs/engines.md: scripts/model_check.py on each ONNX pipeline the
# repository serves or tests, with its model's detector, embedder and their settings (read from
# its config.pbtxt), on the sample photos, and the time of a 640x480 frame through the server.
# Output: out/accuracy.txt. Needs scripts/setup.sh and scripts/build.sh (make bench runs both).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
# shellcheck source=/dev/null
source assets/env.sh
mkdir -p out
# check MODEL [PARAM=VALUE...]: model_check on MODEL's pipeline, VALUEs replacing its own.
check() {
    local model=$1
    shift
    local args
    mapfile -t args < <("$PYTHON" - "$model" "$@" <<'PY'
import re, sys
from pathlib import Path
model, *changes = sys.argv[1:]
text = Path(f"model_repository/{model}/config.pbtxt").read_text()
params = dict(re.findall(r'key: "(\w+)"\s+value: \{ string_value: "([^"]*)" \}', text))
params.update(c.split("=", 1) for c in changes)
onnx = Path("assets/onnx")
print(onnx / params.pop("detector_model"))
print(onnx / params.pop("embedder_model"))
if "landmark_model" in params:
    print("--landmark-model"); print(onnx / params.pop("landmark_model"))
for key, value in params.items():
    if key.startswith(("detector_", "embedder_", "nms_")):
        print("--param"); print(f"{key}={value}")
PY
)
    echo "#### $model $*"
    "$PYTHON" scripts/model_check.py "${args[@]}" --time "$FACE_PHOTOS/obama_640x480.jpg" |
        grep -E "^(obama|biden).*face|^same person|^different people|^== match_threshold|^== obama_640"
}
{
    check face_onnx
    check face_onnx_blazeface
    check face_onnx_yunet
    check face_onnx_yunet detector_family=scrfd detector_model=scrfd_2.5g_kps.onnx
    check face_onnx_resnet
} | tee out/accuracy.txt
