#!/usr/bin/env bash
# System packages the test suite runs for real: Debian's docker-registry (a real OCI registry
# on loopback, for image-signature tests), chromium (renders the HTML run report) and
# prometheus-pushgateway (a real Pushgateway on loopback for the metrics push) and npm (fetches
# the pinned provider bindings whose .jsii schemas tests/terraform/test_tf_schema.py checks),
# shellcheck (the CI templates' scripts, tests/ci_templates; actionlint runs it too).
# Idempotent; installs only what is missing, and only where it can (root with apt-get).
set -euo pipefail
missing=()
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus-pushgateway >/dev/null 2>&1 || [ -x /usr/bin/prometheus-pushgateway ] \
  || missing+=(prometheus-pushgateway)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: please install: ${missing[*]} (Debian packages)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "system-deps: installed ${missing[*]}"
