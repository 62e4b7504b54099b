#!/usr/bin/env python3
"""safetensors round trips between Kiln and Python's `safetensors` package
(numpy backend), byte for byte (issue 17).

    safetensors_interop.py --tool KILN_SAFETENSORS_INTEROP --out DIR

Installs safetensors and numpy with pip if missing (exit 77 = skipped, with
the reason, when pip cannot). Then:

1. Kiln -> Python: the tool writes DIR/kiln.safetensors (kiln::save: F32,
   F16, BF16, I64, BOOL, a 0-d, an empty and a transposed view; string
   metadata with non-ASCII and JSON text). The package reads it:
   safetensors.deserialize gives every tensor's dtype, shape and raw bytes,
   which must equal the bytes expected here, computed independently of
   Kiln: numpy's float16 cast and a round-to-nearest-even bfloat16 from the
   float32 bits (NaNs compared as NaN, since a NaN's payload is the
   converter's choice); safe_open(framework="np") must give the same arrays;
   its metadata() must hold the written entries (plus Kiln's own "kiln").
2. Python -> Kiln: the package writes DIR/numpy.safetensors
   (safetensors.numpy.save_file: F32, F16, F64, I64, I32, BOOL, 0-d, empty,
   metadata) and DIR/bf16.safetensors (safetensors.serialize_file with a BF16
   TensorSpec: numpy has no bfloat16) and DIR/nometa.safetensors (no
   metadata at all); the tool reads each with kiln::load and
   prints every tensor's bytes, which must equal the arrays' tobytes() exactly,
   with the same names, dtypes, shapes and metadata.
Exit 0 when all match, 1 otherwise (each mismatch printed).
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pip_require import require  # noqa: E402

FAILURES = []


def expect(cond, what):
    if not cond:
        FAILURES.append(what)
        print("MISMATCH:", what)


def bf16_bits(np, f32):
    """float32 -> bfloat16 bits, round to nearest even (NaN -> 0x7fc0)."""
    bits = f32.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded)


def same_values(np, a, b):
    """Bytes equal, except NaNs (any payload) match NaNs."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        return bool(np.array_equal(nan, np.isnan(b)) and a[~nan].tobytes() == b[~nan].tobytes())
    return a.tobytes() == b.tobytes()


def kiln_read(tool, path):
    out = subprocess.run([tool, "read", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{tool} read {path} failed: {out.stderr.strip()}")
    tensors, meta, verified = {}, {}, None
    for line in out.stdout.splitlines():
        parts = line.split(" ")
        if parts[0] == "tensor":
            _, name, dtype, shape, data = parts
            tensors[name] = (dtype, [] if shape == "-" else [int(d) for d in shape.split(",")],
                             b"" if data == "-" else bytes.fromhex(data))
        elif parts[0] == "meta":
            meta[bytes.fromhex(parts[1]).decode()] = bytes.fromhex(parts[2]).decode() if parts[2] != "-" else ""
        elif parts[0] == "verified":
            verified = parts[1] == "1"
    return tensors, meta, verified


def kiln_to_python(tool, out, np, safetensors, safe_open):
    path = os.path.join(out, "kiln.safetensors")
    done = subprocess.run([tool, "write", path])
    if done.returncode != 0:
        raise RuntimeError(f"{tool} write failed")
    inf, nan = np.float32(np.inf), np.float32(np.nan)
    f = np.array([0.0, -0.0, 1.0, -2.5, 3.14159265, 1e-40, 65504.0, -1.0009765625, 1.00390625, 1.01171875,
                  inf, -inf, nan, 1e-5, 123456.789, -7.0e-3], dtype=np.float32).reshape(4, 4)
    with np.errstate(over="ignore"):  # 123456.789 overflows float16 to inf, as it must
        f16 = f.astype(np.float16)
    expected = {
        "weight.f32": ("F32", f),
        "weight.f16": ("F16", f16),
        "weight.bf16": ("BF16", bf16_bits(np, f)),
        "ids.i64": ("I64", np.array([-(2 ** 62), -1, 0, 2 ** 53 + 1, 42], dtype=np.int64)),
        "mask.bool": ("BOOL", np.array([[True, False, True], [True, False, False]])),
        "scalar.f32": ("F32", np.array(3.25, dtype=np.float32)),
        "transposed.f32": ("F32", np.array([[1, 4], [2, 5], [3, 6]], dtype=np.float32)),
        "empty.f32": ("F32", np.zeros((0, 3), dtype=np.float32)),
    }
    meta = {"format": "pt", "producer": "kiln", "unicode": "h\u00e9llo \u2713",
            "json": '{"epoch": 3, "lr": [0.001, 0.0001]}', "empty": ""}
    with open(path, "rb") as fh:
        raw = {name: info for name, info in safetensors.deserialize(fh.read())}
    expect(sorted(raw) == sorted(expected), f"kiln file tensor names {sorted(raw)} != {sorted(expected)}")
    with safe_open(path, framework="np") as fh:
        got_meta = fh.metadata()
        arrays = {k: fh.get_tensor(k) for k in fh.keys() if raw[k]["dtype"] != "BF16"}  # numpy has no bf16
    for name, (dtype, want) in expected.items():
        if name not in raw:
            continue
        info = raw[name]
        expect(info["dtype"] == dtype, f"{name}: dtype {info['dtype']} != {dtype}")
        expect(list(info["shape"]) == list(want.shape), f"{name}: shape {info['shape']} != {list(want.shape)}")
        np_dtype = np.uint16 if dtype == "BF16" else want.dtype
        got = np.frombuffer(bytes(info["data"]), dtype=np_dtype).reshape(want.shape)
        if dtype == "BF16":  # compare as float32 to let NaN payloads differ
            as_f32 = lambda b: (b.astype(np.uint32) << 16).view(np.float32)  # noqa: E731
            expect(same_values(np, as_f32(got), as_f32(want)), f"{name}: bytes {got} != {want}")
        else:
            expect(same_values(np, got, want), f"{name}: bytes {got!r} != {want!r}")
        if name in arrays:
            expect(same_values(np, arrays[name], want), f"{name}: safe_open(np) gives {arrays[name]!r}")
    for k, v in meta.items():
        expect(got_meta.get(k) == v, f"metadata {k!r}: {got_meta.get(k)!r} != {v!r}")
    expect(set(got_meta) == set(meta) | {"kiln"}, f"metadata keys {sorted(got_meta)}")
    print(f"kiln -> safetensors {safetensors.__version__}: {len(raw)} tensors (F32 F16 BF16 I64 BOOL, 0-d, empty, "
          f"view), {len(got_meta)} metadata entries read")


def python_to_kiln(tool, out, np, safetensors, st_numpy):
    arrays = {
        "a.f32": np.array([[1.5, -0.0, np.inf], [np.nan, 1e-42, -3.0]], dtype=np.float32),
        "b.f16": np.array([0.5, -65504.0, 6e-8, np.nan], dtype=np.float16),
        "c.f64": np.array([np.pi, -1e300], dtype=np.float64),
        "d.i64": np.array([[-(2 ** 63), 2 ** 63 - 1], [7, -7]], dtype=np.int64),
        "e.i32": np.array([-(2 ** 31), 12345], dtype=np.int32),
        "f.bool": np.array([True, False, False, True]),
        "g.scalar": np.array(-8.5, dtype=np.float32),
        "h.empty": np.zeros((2, 0), dtype=np.int64),
    }
    meta = {"source": "python safetensors", "note": "\u00fcber \u2713", "epoch": "12"}
    path = os.path.join(out, "numpy.safetensors")
    st_numpy.save_file(arrays, path, metadata=meta)
    bf = np.array([0x3F80, 0xC020, 0x7F80, 0x0001, 0x8000, 0x4049], dtype=np.uint16).reshape(2, 3)
    f32 = np.array([2.0, -4.0], dtype=np.float32)
    bf_path = os.path.join(out, "bf16.safetensors")
    spec = lambda dt, a: safetensors.TensorSpec(dtype=dt, shape=list(a.shape), data_ptr=a.ctypes.data,  # noqa: E731
                                                data_len=a.nbytes)
    safetensors.serialize_file({"w.bf16": spec("bfloat16", bf), "x.f32": spec("float32", f32)}, bf_path,
                               metadata={"dtype": "bfloat16"})
    plain = np.arange(6, dtype=np.float32).reshape(3, 2)
    plain_path = os.path.join(out, "nometa.safetensors")  # no __metadata__ at all
    st_numpy.save_file({"plain": plain}, plain_path)
    names = {"float32": "F32", "float16": "F16", "float64": "F64", "int64": "I64", "int32": "I32", "bool": "BOOL"}
    for file, want, want_meta, dtypes in (
            (path, arrays, meta, {k: names[a.dtype.name] for k, a in arrays.items()}),
            (bf_path, {"w.bf16": bf, "x.f32": f32}, {"dtype": "bfloat16"}, {"w.bf16": "BF16", "x.f32": "F32"}),
            (plain_path, {"plain": plain}, {}, {"plain": "F32"})):
        tensors, got_meta, verified = kiln_read(tool, file)
        expect(sorted(tensors) == sorted(want), f"{file}: Kiln reads {sorted(tensors)}, expected {sorted(want)}")
        for name, a in want.items():
            if name not in tensors:
                continue
            dtype, shape, data = tensors[name]
            expect(dtype == dtypes[name], f"{file} {name}: Kiln dtype {dtype} != {dtypes[name]}")
            expect(shape == list(a.shape), f"{file} {name}: Kiln shape {shape} != {list(a.shape)}")
            expect(data == a.tobytes(), f"{file} {name}: Kiln bytes {data.hex()} != {a.tobytes().hex()}")
        expect(got_meta == want_meta, f"{file}: Kiln metadata {got_meta} != {want_meta}")
        expect(verified is False, f"{file}: Kiln says verified={verified} for a file without Kiln's checksums")
    print(f"safetensors {safetensors.__version__} -> kiln: {len(arrays) + 3} tensors in 3 files (F32 F16 F64 I64 I32 BOOL BF16, "
          f"0-d, empty) byte for byte, metadata equal")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    np, safetensors = require(("numpy", "numpy"), ("safetensors", "safetensors"))
    from safetensors import safe_open
    import safetensors.numpy as st_numpy
    os.makedirs(args.out, exist_ok=True)
    kiln_to_python(args.tool, args.out, np, safetensors, safe_open)
    python_to_kiln(args.tool, args.out, np, safetensors, st_numpy)
    if FAILURES:
        print(f"FAILED: {len(FAILURES)} mismatches")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
