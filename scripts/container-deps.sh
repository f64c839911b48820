#!/usr/bin/env bash
# Debian packages the container tier needs (tests marked `containers`, `make images` with podman):
# podman and runc (the OCI runtime; crun fails on hybrid cgroups), buildah, mmdebstrap (a base
# image from Debian packages where no registry is reachable), uidmap and docker-registry
# (a real registry on loopback for push, pin and sign). cosign is installed where the
# distribution has it (Debian trixie); without it the cosign check is skipped.
# Idempotent; installs only what is missing, and only where it can (root with apt-get).
set -euo pipefail
missing=()
for p in podman runc buildah mmdebstrap; do command -v "$p" >/dev/null 2>&1 || missing+=("$p"); done
command -v newuidmap >/dev/null 2>&1 || missing+=(uidmap)
command -v docker-registry >/dev/null 2>&1 || [ -x /usr/bin/docker-registry ] || missing+=(docker-registry)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "container-deps: please install: ${missing[*]} (Debian packages)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
if ! command -v cosign >/dev/null 2>&1 && apt-cache show cosign >/dev/null 2>&1; then
  apt-get install -y -qq --no-install-recommends cosign >/dev/null || true
fi
echo "container-deps: installed ${missing[*]}"
