#!/usr/bin/env bash
# System packages the test suite runs for real: Debian's docker-registry (a real OCI registry
# on loopback, for image-signature tests), chromium (renders the HTML run report) and
# prometheus-pushgateway (a real Pushgateway on loopback for the metrics push) and npm (fetches
# the pinned provider bindings whose .jsii schemas tests/terraform/test_tf_schema.py checks),
# and runc, containernetworking-plugins and busybox-static (the engines tier's real
# kubelet, tests/cluster/test_real_kubelet.py: the OCI runtime, the loopback CNI plugin, the
# image's one binary). The linters the tests check with (shellcheck, actionlint,
# check-jsonschema) are not taken from here: the test extra pins them (pyproject.toml), so a
# machine's own shellcheck never changes a result.
# Idempotent; installs only what is missing, and only where it can (root with apt-get).
set -euo pipefail
missing=()
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v prometheus-pushgateway >/dev/null 2>&1 || [ -x /usr/bin/prometheus-pushgateway ] \
  || missing+=(prometheus-pushgateway)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ] || missing+=(runc)
[ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' \
  || missing+=(busybox-static)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "system-deps: please install: ${missing[*]} (Debian packages)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=300 update -qq >/dev/null
apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "system-deps: installed ${missing[*]}"
