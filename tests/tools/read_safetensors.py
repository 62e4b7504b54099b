#!/usr/bin/env python3
"""An independent safetensors reader, written from the format description
(https://github.com/huggingface/safetensors#format) with json + struct only,
to check files written by kiln::save without third-party packages (the
round trips with the `safetensors` package itself: safetensors_interop.py).

    read_safetensors.py FILE [--max N]

Checks the layout (8-byte little-endian header length, JSON header, data
offsets that tile the data section in order without gaps or overlap, byte
counts equal to dtype size x shape) and, when the file has Kiln's "kiln"
metadata entry, its format_version and both CRC-32 checksums. Prints one line
per tensor in data order:

    <name> <DTYPE> [<shape>] [<values, row-major>]

then one line per user metadata entry ("meta <key> = <value>") and a line
"kiln: format_version 1, checksums ok" for Kiln files. Floats print as
Python's repr (1.0, -2.5, nan, inf), BOOL as true/false. At most --max values
per tensor are printed (default 64), followed by "...". Exits 1 with
"error: ..." on stderr for an invalid file.
"""
import json
import struct
import sys
import zlib

# dtype -> (bytes per element, struct code or None for the 16-bit float kinds)
DTYPES = {
    "F64": (8, "d"), "F32": (4, "f"), "F16": (2, "e"), "BF16": (2, None),
    "I64": (8, "q"), "I32": (4, "i"), "I16": (2, "h"), "I8": (1, "b"),
    "U64": (8, "Q"), "U32": (4, "I"), "U16": (2, "H"), "U8": (1, "B"),
    "BOOL": (1, "?"),
}
MAX_HEADER = 100_000_000


class FormatError(Exception):
    pass


def parse_header(blob):
    if len(blob) < 8:
        raise FormatError(f"file has {len(blob)} bytes, fewer than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER or n > len(blob) - 8:
        raise FormatError(f"header length {n} does not fit the file ({len(blob)} bytes)")
    text = blob[8:8 + n].decode("utf-8")
    if not text.startswith("{"):
        raise FormatError("header does not start with '{'")
    header = json.loads(text)
    if not isinstance(header, dict):
        raise FormatError("header is not a JSON object")
    return header, 8 + n


def tensor_entries(header, data_size):
    entries = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            raise FormatError(f"tensor {name!r}: unknown dtype {dtype!r}")
        count = 1
        for d in shape:
            if not isinstance(d, int) or d < 0:
                raise FormatError(f"tensor {name!r}: bad shape {shape}")
            count *= d
        if end - begin != count * DTYPES[dtype][0]:
            raise FormatError(f"tensor {name!r}: data_offsets [{begin}, {end}] do not match {dtype} x {shape}")
        entries.append((begin, end, name, dtype, shape, count))
    entries.sort()
    expected = 0
    for begin, end, name, *_ in entries:
        if begin != expected:
            raise FormatError(f"tensor {name!r} starts at {begin}, expected {expected} (gap or overlap)")
        expected = end
    if expected != data_size:
        raise FormatError(f"tensors cover {expected} bytes, the data section has {data_size}")
    return entries


def decode(raw, dtype, count):
    size, code = DTYPES[dtype]
    if dtype == "BF16":  # the high half of a float32
        halves = struct.unpack(f"<{count}H", raw)
        return [struct.unpack("<f", struct.pack("<I", h << 16))[0] for h in halves]
    return list(struct.unpack(f"<{count}{code}", raw))


def fmt(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def check_kiln(header, data):
    meta = header.get("__metadata__", {})
    kiln = json.loads(meta["kiln"])
    rest = dict(header)
    rest["__metadata__"] = {k: v for k, v in meta.items() if k != "kiln"}
    canonical = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    if zlib.crc32(canonical) != kiln["header_crc32"]:
        raise FormatError(f"header CRC-32 {zlib.crc32(canonical)} != stored {kiln['header_crc32']}")
    if zlib.crc32(data) != kiln["data_crc32"]:
        raise FormatError(f"data CRC-32 {zlib.crc32(data)} != stored {kiln['data_crc32']}")
    return kiln["format_version"]


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    limit = int(argv[argv.index("--max") + 1]) if "--max" in argv else 64
    with open(argv[1], "rb") as f:
        blob = f.read()
    try:
        header, data_start = parse_header(blob)
        data = blob[data_start:]
        entries = tensor_entries(header, len(data))
        version = check_kiln(header, data) if "kiln" in header.get("__metadata__", {}) else None
    except (FormatError, ValueError, KeyError, TypeError) as e:
        print(f"error: {argv[1]}: {e}", file=sys.stderr)
        return 1
    for begin, end, name, dtype, shape, count in entries:
        values = decode(data[begin:end], dtype, count)
        shown = ", ".join(fmt(v) for v in values[:limit]) + (", ..." if count > limit else "")
        print(f"{name} {dtype} [{', '.join(str(d) for d in shape)}] [{shown}]")
    for key, value in sorted(header.get("__metadata__", {}).items()):
        if key != "kiln":
            print(f"meta {key} = {value}")
    if version is not None:
        print(f"kiln: format_version {version}, checksums ok")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
