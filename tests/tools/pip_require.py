"""Imports Python packages for an interop test, installing them with pip
when missing (pip's own cache makes later runs cheap); exits 77, which ctest
reports as skipped (SKIP_RETURN_CODE), with the reason when pip cannot.

    from pip_require import require
    ort, np = require(("onnxruntime", "onnxruntime"), ("numpy", "numpy"))
"""
import importlib
import subprocess
import sys

SKIP = 77


def require(*packages):
    """packages: (module name, pip requirement) pairs. Returns the modules."""
    missing = []
    for module, requirement in packages:
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(requirement)
    if missing:
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *missing]
        print("installing with pip:", " ".join(missing), flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            print(f"SKIPPED: pip cannot install {' '.join(missing)} ({'; '.join(tail)})", flush=True)
            sys.exit(SKIP)
        importlib.invalidate_caches()
    try:
        return tuple(importlib.import_module(module) for module, _ in packages)
    except ImportError as e:
        print(f"SKIPPED: {e} after pip install", flush=True)
        sys.exit(SKIP)
