# Sourced by the GPU bundle's run.sh (tests/gpu/bundle-run.sh) and by tests/gpu/t-gpu-bundle.sh.
# cudart_dirs PY: the directories where a CUDA runtime (libcudart.so.13 or .12) may be, best
# first, one per line: the one torch has loaded (read from the process's own mappings after
# `import torch`, whatever the wheel layout), the CUDA 13 wheels' nvidia/cu13/lib, the CUDA 12
# wheels' nvidia/cuda_runtime/lib (and nvidia/cu12/lib), then the CUDA toolkit's. Prints the
# toolkit's even without a Python.
cudart_dirs() {
	"$1" - 2>/dev/null <<'PY'
import os
dirs = []
try:
    import torch  # noqa: F401  loads libcudart with libtorch_cuda where torch has CUDA
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            if "/libcudart.so" in path:
                dirs.append(os.path.dirname(path))
except Exception:
    pass
try:
    import nvidia
    for base in list(nvidia.__path__):
        dirs += [os.path.join(base, s) for s in ("cu13/lib", "cuda_runtime/lib", "cu12/lib")]
except Exception:
    pass
seen = set()
for d in dirs:
    if d not in seen:
        seen.add(d)
        print(d)
PY
	echo /usr/local/cuda/lib64
	echo /usr/local/cuda/targets/x86_64-linux/lib
}
