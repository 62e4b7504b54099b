#!/usr/bin/env python3
"""Runs a Kiln ONNX export in ONNX Runtime and compares with Kiln (issue 17).

    onnx_ort_check.py --tool KILN_ONNX_EXPORT --model mlp|gpt|cnn --out DIR [--atol 1e-5]

1. Installs onnxruntime and numpy with pip if missing (exit 77 = skipped,
   with the reason, when pip cannot).
2. Runs the tool: DIR/<model>.onnx (dynamic batch) and
   DIR/<model>_io.safetensors (inputs and Kiln's eager eval outputs at the
   export batch, "@export", and another batch, "@dynamic").
3. Runs the model in onnxruntime (CPU; once with every graph optimization
   off, so the graph runs as exported, once with all of them) at both batch
   sizes and prints, per case, the max
   absolute difference and the max relative difference (|ort - kiln| /
   max|kiln| over the tensor). Exit 0 when every max abs diff <= atol, 1 otherwise.

The .safetensors file is read here with json + numpy (read_safetensors.py's
parser), not with the safetensors package.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pip_require import require  # noqa: E402
import read_safetensors as st  # noqa: E402


def load_io(path, np):
    with open(path, "rb") as f:
        blob = f.read()
    header, start = st.parse_header(blob)
    data = blob[start:]
    st.check_kiln(header, data)  # Kiln's two CRC-32s
    dtypes = {"F32": np.float32, "I64": np.int64, "F64": np.float64, "BOOL": np.bool_, "I32": np.int32}
    out = {}
    for b, e, name, dtype, shape, _ in st.tensor_entries(header, len(data)):
        out[name] = np.frombuffer(data[b:e], dtype=dtypes[dtype]).reshape(shape)
    return out, header.get("__metadata__", {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args()
    ort, np = require(("onnxruntime", "onnxruntime"), ("numpy", "numpy"))

    os.makedirs(args.out, exist_ok=True)
    done = subprocess.run([args.tool, "--model", args.model, "--out", args.out])
    if done.returncode != 0:
        print(f"FAILED: {args.tool} exited {done.returncode}")
        return 1
    io, meta = load_io(os.path.join(args.out, f"{args.model}_io.safetensors"), np)
    in_name, out_name = meta["input"], meta["output"]
    ok = True
    # As exported (no graph rewrites), then with ORT's default rewrites
    # (constant folding, fusions), as a deployment would run it.
    for level_name, level in (("no optimization", ort.GraphOptimizationLevel.ORT_DISABLE_ALL),
                              ("all optimizations", ort.GraphOptimizationLevel.ORT_ENABLE_ALL)):
        so = ort.SessionOptions()
        so.graph_optimization_level = level
        so.intra_op_num_threads = 1
        sess = ort.InferenceSession(os.path.join(args.out, f"{args.model}.onnx"), so,
                                    providers=["CPUExecutionProvider"])
        assert [i.name for i in sess.get_inputs()] == [in_name], sess.get_inputs()
        assert [o.name for o in sess.get_outputs()] == [out_name], sess.get_outputs()
        for case in ("export", "dynamic"):
            x, want = io[f"{in_name}@{case}"], io[f"{out_name}@{case}"]
            got = sess.run([out_name], {in_name: x})[0]
            if got.shape != want.shape or got.dtype != want.dtype:
                print(f"{args.model} {case}: ORT gives {got.dtype}{list(got.shape)}, Kiln {want.dtype}{list(want.shape)}")
                ok = False
                continue
            diff = np.abs(got.astype(np.float64) - want.astype(np.float64))
            max_abs = float(diff.max())
            max_rel = max_abs / float(np.abs(want).max())
            passed = max_abs <= args.atol
            ok &= passed
            print(f"{args.model} {case} batch {x.shape[0]} ({level_name}): output {list(want.shape)}, max|kiln| "
                  f"{float(np.abs(want).max()):.4g}, max abs diff {max_abs:.3g}, max rel diff {max_rel:.3g} "
                  f"(onnxruntime {ort.__version__}, opset {meta.get('opset')}) {'ok' if passed else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
