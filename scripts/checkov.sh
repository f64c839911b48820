#!/usr/bin/env bash
# Run checkov 3.3.30 over terraform/ offline, from its own virtual environment.
#
#   scripts/checkov.sh [extra checkov arguments...]
#
# checkov pins old boto3/packaging/networkx, so it lives in .venv-checkov (created here on
# first use from PyPI, reused after), never in the project's .venv. It runs with
# BC_SKIP_MAPPING=TRUE and --skip-download so it never calls home. Deliberate skips are
# written inline in the .tf files (#checkov:skip=CKV_...:reason), never on this command line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${BURST_CHECKOV_VENV:-$ROOT/.venv-checkov}"
VERSION="3.3.30"
PYTHON="${PYTHON:-python3}"

# Created under a lock: two runs at once (parallel test workers) would otherwise both create
# the environment, and one would run a half-made pip.
install() {
  if ! "$VENV/bin/checkov" --version 2>/dev/null | grep -qx "$VERSION"; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$VERSION"
  fi
}
if ! "$VENV/bin/checkov" --version 2>/dev/null | grep -qx "$VERSION"; then
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  flock 9
  install
  flock -u 9
fi

export BC_SKIP_MAPPING=TRUE
export CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false
cd "$ROOT"
exec "$VENV/bin/checkov" --directory terraform --framework terraform --skip-download \
  --quiet --compact "$@"
