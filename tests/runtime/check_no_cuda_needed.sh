#!/usr/bin/env bash
# Fails when a binary has a DT_NEEDED entry on a CUDA library: Kiln loads
# them all at run time (runtime/README.md, "Decisions"), so every binary must
# start on a machine without the driver or the toolkit.
# Usage: check_no_cuda_needed.sh BINARY...
set -euo pipefail
status=0
for binary in "$@"; do
  needed=$(readelf -d "$binary" | grep NEEDED || true)
  if grep -E 'lib(cuda|cudart|nvrtc|cublas|cublasLt|cudnn[a-z_]*|nccl)\.so' <<<"$needed"; then
    echo "FAIL: $binary links a CUDA library (above); dlopen it instead"
    status=1
  else
    echo "ok: $binary has no CUDA DT_NEEDED ($(grep -c NEEDED <<<"$needed") entries)"
  fi
done
exit $status
