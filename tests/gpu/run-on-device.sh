#!/usr/bin/env bash
# The GPU checks on a machine with a CUDA device, results into OUTDIR (never into build/):
# runs the bundle of `make gpu-bundle` (tests/gpu/bundle-run.sh: t-gpu and t-gpu-order against the
# real runtime, the GPU benchmark, the pipeline sweep, the Python CUDA comparison against
# torch.distributed.checkpoint.async_save; 8 minutes in all, a timeout per step).
#
# A bare GPU server has no compiler or -dev packages: build the bundle elsewhere (`make
# gpu-bundle`, a folder under 64 MiB with the Debian libraries it needs), copy it over, and run
# gpu-bundle/run.sh OUTDIR there; this script does exactly that when the bundle is already built
# (GPU_BUNDLE=DIR names another one), and builds it first only where `make gpu-bundle` can run.
#
# Usage: tests/gpu/run-on-device.sh OUTDIR
set -u
out=${1:?usage: tests/gpu/run-on-device.sh OUTDIR}
cd "$(dirname "$0")/../.."
bundle=${GPU_BUNDLE:-${B:-build}/gpu-bundle}
if [ ! -x "$bundle/run.sh" ]; then
	echo "run-on-device: $bundle not built; trying make gpu-bundle"
	make gpu-bundle >&2 || { echo "run-on-device: FAIL: cannot build the bundle here" >&2; exit 1; }
fi
exec "$bundle/run.sh" "$out"
