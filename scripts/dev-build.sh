#!/usr/bin/env bash
# Rebuilds the extension into the current Python environment (editable install).
# Serialised with flock so parallel workers never run two cargo builds at once.
set -euo pipefail
cd "$(dirname "$0")/.."
exec flock /tmp/codecspec-build.lock pip install --no-build-isolation --no-deps -e . -q
