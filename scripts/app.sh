#!/usr/bin/env bash
# The browser app, from a fresh machine: set up, build, then serve scripts/app.py with
# Streamlit on http://localhost:8501 (APP_PORT). The app starts a tritonserver on
# model_repository/ itself when none answers at FACE_URL (default localhost:8000).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
# shellcheck source=/dev/null
source assets/env.sh
bash scripts/build.sh

export FACE_APP_MAX_UPLOAD_MB="${FACE_APP_MAX_UPLOAD_MB:-50}"
echo "== streamlit: open http://localhost:${APP_PORT:-8501} (Ctrl-C stops the app and its server)"
# Streamlit's own upload limit (whole megabytes, at least 1) follows the app's; the app
# refuses anything above its own with a message. Other settings: .streamlit/config.toml.
mb="${FACE_APP_MAX_UPLOAD_MB%.*}"
[ "${mb:-0}" -ge 1 ] || mb=1
exec "$PYTHON" -m streamlit run scripts/app.py --server.port "${APP_PORT:-8501}" \
    --server.address "${APP_ADDRESS:-127.0.0.1}" \
    --server.maxUploadSize "$mb"
