#!/usr/bin/env python3
"""Compares the tensors of two safetensors files (read with
read_safetensors.py's checks: layout and, for Kiln files, both CRC-32s).

    compare_safetensors.py GOT EXPECTED [--rtol R] [--atol-for NAME=A ...] [--expect-differ]

Both files must hold the same tensor names, dtypes and shapes. A tensor
matches when max |got - expected| <= R * max |expected| over its elements
(relative to the tensor's scale, so that elements near zero do not decide;
default R 1e-5). --atol-for NAME=A compares tensor NAME by max |got - expected|
<= A instead: for a tensor whose true gradient is zero (a transformer's key
bias: softmax over the keys ignores q . b_k, the same for every key), so that
it moves on float rounding alone, a few ulps of nothing, which no relative
tolerance can hold. Prints one line per tensor with its difference.
Exits 0 when every tensor matches; with --expect-differ, 0 when some tensor
does not (a check that the comparison can tell two trainings apart).
Exits 1 otherwise, 2 for an unreadable file.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_safetensors as st  # noqa: E402


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    header, start = st.parse_header(blob)
    data = blob[start:]
    entries = st.tensor_entries(header, len(data))
    if "kiln" in header.get("__metadata__", {}):
        st.check_kiln(header, data)
    return {name: (dtype, shape, st.decode(data[b:e], dtype, n)) for b, e, name, dtype, shape, n in entries}


def relative_difference(got, expected):
    scale = max((abs(v) for v in expected), default=0.0)
    worst = max((abs(a - b) for a, b in zip(got, expected)), default=0.0)
    return worst / scale if scale > 0 else worst


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    rtol = float(argv[argv.index("--rtol") + 1]) if "--rtol" in argv else 1e-5
    atol_for = {}
    for i, a in enumerate(argv):
        if a == "--atol-for" and i + 1 < len(argv) and "=" in argv[i + 1]:
            name, value = argv[i + 1].split("=", 1)
            atol_for[name] = float(value)
    expect_differ = "--expect-differ" in argv
    try:
        got, expected = load(argv[1]), load(argv[2])
    except (OSError, st.FormatError, ValueError, KeyError, TypeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if sorted(got) != sorted(expected):
        print(f"different tensors: {sorted(got)} vs {sorted(expected)}")
        return 1
    all_match = True
    for name in expected:
        (gd, gs, gv), (ed, es, ev) = got[name], expected[name]
        if (gd, gs) != (ed, es):
            print(f"{name}: {gd} {gs} vs {ed} {es}")
            return 1
        if name in atol_for:
            diff = max((abs(a - b) for a, b in zip(gv, ev)), default=0.0)
            ok = diff <= atol_for[name]
            all_match &= ok
            print(f"{name} {ed} {es}: max |got - expected| = {diff:.3g} ({'<=' if ok else '>'} {atol_for[name]:g}, "
                  f"absolute)")
            continue
        rel = relative_difference(gv, ev)
        ok = rel <= rtol
        all_match &= ok
        print(f"{name} {ed} {es}: max |got - expected| / max |expected| = {rel:.3g} ({'<=' if ok else '>'} {rtol:g})")
    if expect_differ:
        print("the files differ, as expected" if not all_match else "the files match, but they should differ")
        return 0 if not all_match else 1
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
