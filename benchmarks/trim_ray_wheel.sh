#!/usr/bin/env bash
# Builds a trimmed Ray wheel small enough to travel to the device machine (64 MiB in all for everything carried).
#
# Downloads ray's manylinux x86_64 wheel (cp311 by default, RAY_PY=3.12 for cp312) with pip, removes what actors on one node never load (the dashboard
# and its web client, the autoscaler's cloud providers, the Ray Client server's generated protos for other languages,
# the Java and C++ APIs, RLlib, Tune, Serve, Train, Data, Air, the tests and the type stubs), rewrites the RECORD and
# repacks it. Core, the raylet and GCS binaries, the object store and the actor API stay.
#
#   benchmarks/trim_ray_wheel.sh [OUT_DIR]    (default: .device/wheels)
#
# Install it on the device with `pip install --no-deps OUT_DIR/ray-*.whl` (benchmarks/README.md).
set -euo pipefail
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/wheel_tools.sh"  # unpack, strip_libs, repack

VERSION="${RAY_VERSION:-2.60.0}"
PY="${RAY_PY:-3.11}"  # the Python the wheel is for (the device machine runs 3.12: RAY_PY=3.12)
ABI="cp${PY/./}"
OUT="${1:-.device/wheels}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # absolute: the trim works in a folder of its own
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" \
    --platform manylinux2014_x86_64 --implementation cp --abi "$ABI" "ray==${VERSION}" -d "$WORK/dl"
WHEEL="$(ls "$WORK"/dl/ray-*.whl)"
echo "downloaded $(basename "$WHEEL"): $(du -h "$WHEEL" | cut -f1)"

# extracted with the files' modes (the raylet and GCS binaries must stay executable)
unpack "$WHEEL" "$WORK/tree"
cd "$WORK/tree/ray"
# the parts an actor on one node does not load (the dashboard agent, started with every node, needs dashboard/modules)
rm -rf dashboard/client \
    autoscaler/aws autoscaler/gcp autoscaler/azure autoscaler/_private/aws autoscaler/_private/gcp \
    autoscaler/_private/_azure autoscaler/_private/kuberay autoscaler/_private/vsphere autoscaler/v2/tests \
    rllib tune serve train data air workflow jars cpp llm \
    tests _private/runtime_env/agent/thirdparty_files 2>/dev/null || true
find . -name '*.pyi' -delete
find . -type d -name tests -prune -exec rm -rf {} +
find . -type d -name __pycache__ -prune -exec rm -rf {} +
cd "$WORK/tree"

# rewrite the RECORD for the files that stay, then repack
rm -f "$OUT/$(basename "$WHEEL")"
repack "$WORK/tree" "$OUT/$(basename "$WHEEL")"
echo "trimmed: $OUT/$(basename "$WHEEL"): $(du -h "$OUT/$(basename "$WHEEL")" | cut -f1)"
