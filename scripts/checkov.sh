#!/usr/bin/env bash
# Run checkov 3.3.30 over terraform/ offline, from its own virtual environment.
#
#   scripts/checkov.sh [extra checkov arguments...]
#
# BURST_CHECKOV_DIR scans another directory than terraform/ (the tests' broken copy of a module).
#
# checkov pins old boto3/packaging/networkx, so it lives in a virtualenv of its own, never in
# the project's .venv: ~/.cache/burst/venv-checkov-<version> (created on first use from PyPI,
# then reused by every clone on the machine, as the DeepSpeed op cache is: installing it took a
# minute of every fresh clone's make test), or $BURST_CHECKOV_VENV. It runs with
# BC_SKIP_MAPPING=TRUE and --skip-download so it never calls home. Deliberate skips are
# written inline in the .tf files (#checkov:skip=CKV_...:reason), never on this command line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VERSION="3.3.30"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/burst"
VENV="${BURST_CHECKOV_VENV:-$CACHE/venv-checkov-$VERSION}"
PYTHON="${PYTHON:-python3}"

# Created under a lock: two runs at once (parallel test workers) would otherwise both create
# the environment, and one would run a half-made pip.
# Whether the environment holds this version: read from its package metadata (starting checkov
# itself to ask costs about 2.5 CPU-seconds).
installed() {
  "$VENV/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(m.version("checkov") != sys.argv[1])' \
    "$VERSION" 2>/dev/null
}
install() {
  if ! installed; then
    "$PYTHON" -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "checkov==$VERSION"
  fi
}
if ! installed; then
  mkdir -p "$(dirname "$VENV")"
  exec 9>"$VENV.lock"
  flock 9
  install
  flock -u 9
fi

export BC_SKIP_MAPPING=TRUE
export CHECKOV_RUN_SCA_PACKAGE_SCAN_V2=false
cd "$ROOT"
exec "$VENV/bin/checkov" --directory "${BURST_CHECKOV_DIR:-terraform}" --framework terraform --skip-download \
  --quiet --compact "$@"
