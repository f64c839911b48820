#!/usr/bin/env bash
# Build, check, push and sign the burst images from images/lock.json.
#
#   images/build.sh [steps|trainer|all]      (default: all)
#
# Needs docker with buildx, and push rights to the repositories in images/lock.json
# (override with BURST_STEPS_REPO / BURST_TRAINER_REPO). Signing: with cosign when it is on PATH
# and COSIGN_KEY is set (CI: see docs/images.md for keyless), else with `burst image sign`
# and BURST_SIGNING_KEY (a PEM ECDSA P-256 key). A trainer image whose torch, NCCL or DeepSpeed
# differ from its labels is never signed (so verify-image refuses it); a failed signature fails
# the script. Prints the digest-pinned references to put in a spec's image.reference.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
lock="$here/lock.json"
what="${1:-all}"
version="${BURST_VERSION:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo dev)}"
python="${PYTHON:-python3}"

lockval() { "$python" -c 'import json,sys; d=json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."): d=d[k]
print(d)' "$lock" "$1"; }

sign() {
  local ref="$1"
  if command -v cosign >/dev/null 2>&1 && [[ -n "${COSIGN_KEY:-}" ]]; then
    cosign sign --yes --key "$COSIGN_KEY" --tlog-upload=false "$ref"
  elif [[ -n "${BURST_SIGNING_KEY:-}" ]]; then
    "$python" -m burst.cli.main image sign "$ref" --key "$BURST_SIGNING_KEY"
  else
    echo "build.sh: no signing key: set COSIGN_KEY (with cosign) or BURST_SIGNING_KEY" >&2
    return 1
  fi
}

build() {
  local name="$1" repo="$2"; shift 2
  local meta; meta="$(mktemp)"
  docker buildx build "$root" --file "$here/$name/Dockerfile" \
    --build-arg "BURST_VERSION=$version" "$@" \
    --tag "$repo:$version" --provenance=false --push --metadata-file "$meta" >&2
  local digest; digest="$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["containerimage.digest"])' "$meta")"
  rm -f "$meta"
  echo "$repo@$digest"
}

check_trainer() {
  # The labels claim versions; the image must contain exactly those.
  local ref="$1" want got
  want="$(lockval trainer.torch) $(lockval trainer.nccl) $(lockval trainer.deepspeed)"
  got="$(docker run --rm --entrypoint python "$ref" -c \
    'import torch, deepspeed; print(torch.__version__.split("+")[0], ".".join(map(str, torch.cuda.nccl.version())), deepspeed.__version__)')"
  if [[ "$got" != "$want" ]]; then
    echo "build.sh: $ref contains torch/NCCL/DeepSpeed '$got', images/lock.json says '$want'" >&2
    return 1
  fi
}

if [[ "$what" == steps || "$what" == all ]]; then
  ref="$(build steps "${BURST_STEPS_REPO:-$(lockval repositories.steps)}")"
  sign "$ref"
  echo "steps:   $ref"
fi
if [[ "$what" == trainer || "$what" == all ]]; then
  ref="$(build trainer "${BURST_TRAINER_REPO:-$(lockval repositories.trainer)}" \
    --build-arg "CUDA_VERSION=$(lockval trainer.cuda)" \
    --build-arg "DRIVER_MIN=$(lockval trainer.driver_min)" \
    --build-arg "TORCH_VERSION=$(lockval trainer.torch)" \
    --build-arg "TORCH_INDEX=$(lockval trainer.torch_index)" \
    --build-arg "NCCL_VERSION=$(lockval trainer.nccl)" \
    --build-arg "DEEPSPEED_VERSION=$(lockval trainer.deepspeed)")"
  check_trainer "$ref"
  sign "$ref"
  echo "trainer: $ref"
fi
