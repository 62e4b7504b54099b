#!/usr/bin/env python3
"""Ratios of one run_checks.sh run: kiln.json and torch.json (the same cases,
bench_cuda_eager.cpp / torch_peer.py) -> report.json on stdout.

Per case: Kiln's time over PyTorch's (below 1: Kiln faster). Bandwidth
cases: GB/s over Kiln's own copy kernel's (goal for pointwise >= 0.70) and
over the H200's 4.8 TB/s. GEMMs: TFLOP/s (goal bf16 8192^3 >= 600).

    python3 bench/gpu/report.py kiln.json torch.json
    python3 bench/gpu/report.py --gpt gpt.json [torch_gpt.json]

--gpt: the GPT step of kiln-bench-gpt-cuda (and torch_peer.py --gpt) ->
the issue 16 acceptance ratios: Kiln compiled (the faster of compiled and
compiled with CUDA graphs) over Kiln eager >= 1.5 (step-time ratio), over
torch.compile >= 1.1, each fused row kernel >= 80% of the copy kernel's
bandwidth, MFU >= 40%; beside them GEMM TFLOP/s over cuBLASLt alone, peak
memory at budget 0.5 over budget 1, compile times. A goal whose numbers
are missing (a mode failed, no torch) is null, not false.
"""
import json
import sys

H200_BYTES_PER_S = 4.8e12


def ms(modes, name):
    m = modes.get(name) or {}
    return m.get("ms_per_step")


def gpt_report(kiln, torch):
    km, tm = kiln.get("modes", {}), (torch or {}).get("modes", {})
    compiled = [(ms(km, n), n) for n in ("compiled", "graphs") if ms(km, n)]
    best_ms, best = min(compiled) if compiled else (None, None)
    eager, tcomp, teager = ms(km, "eager"), ms(tm, "compile"), ms(tm, "eager")
    ratio = lambda a, b: a / b if a and b else None  # noqa: E731
    r = {"device": kiln.get("device"), "date": kiln.get("date"), "config": kiln.get("config"),
         "peer": (torch or {}).get("library"), "best_compiled_mode": best,
         "ms_per_step": {f"kiln_{n}": ms(km, n) for n in ("eager", "compiled", "graphs", "budget05")},
         "compiled_over_eager_speedup": ratio(eager, best_ms),
         "compiled_over_torch_compile_speedup": ratio(tcomp, best_ms),
         "compiled_over_torch_eager_speedup": ratio(teager, best_ms),
         "graphs_over_compiled_speedup": ratio(ms(km, "compiled"), ms(km, "graphs")),
         "mfu": {f"kiln_{n}": (km.get(n) or {}).get("mfu") for n in km},
         "peak_memory_bytes": {f"kiln_{n}": (km.get(n) or {}).get("peak_memory_bytes") for n in km},
         "compile_s": {n: {k: km[n].get(k) for k in ("cold_compile_s", "warm_compile_s")}
                       for n in km if "cold_compile_s" in km[n]},
         "errors": {n: m["error"] for n, m in km.items() if "error" in m}}
    for n, m in tm.items():
        r["ms_per_step"][f"torch_{n}"] = m.get("ms_per_step")
        r["mfu"][f"torch_{n}"] = m.get("mfu")
        r["peak_memory_bytes"][f"torch_{n}"] = m.get("peak_memory_bytes")
        if "error" in m:
            r["errors"][f"torch_{n}"] = m["error"]
    # The static model (--perf-report, kiln/codegen/PerfModel.h): the compiled
    # graph's roofline seconds against the measured step (which also holds
    # the eager AdamW step and the launches' overheads).
    r["static_model"] = {n: {"launches": len(m["perf_report"]["launches"]),
                             "step_roofline_s": m["perf_report"]["step_roofline_s"],
                             "measured_s": m["ms_per_step"] / 1e3 if m.get("ms_per_step") else None,
                             "roofline_over_measured": m["perf_report"]["step_roofline_s"] / (m["ms_per_step"] / 1e3)
                             if m.get("ms_per_step") else None}
                         for n, m in km.items() if "perf_report" in m}
    p1, p05 = (km.get("compiled") or {}).get("peak_memory_bytes"), (km.get("budget05") or {}).get("peak_memory_bytes")
    r["peak_memory_budget05_over_budget1"] = ratio(p05, p1)
    ks = kiln.get("kernels", [])
    copy = next((k for k in ks if k.get("name") == "copy_f32" and "GBps" in k), None)
    rows, gemms = [], []
    for k in ks:
        if k.get("kind") == "bandwidth" and k["name"] != "copy_f32":
            rows.append({"name": k["name"], "GBps": k["GBps"], "of_4.8TBps": k["of_4.8TBps"],
                         "of_copy_kernel": k["GBps"] / copy["GBps"] if copy else None})
        elif k.get("kind") == "gemm":
            gemms.append({n: k.get(n) for n in ("name", "m", "k", "n", "cublas_TFLOPs", "kiln_TFLOPs", "of_cublas",
                                                 "error")})
        elif "error" in k:
            r["errors"][k["name"]] = k["error"]
    r["copy_GBps"] = copy["GBps"] if copy else None
    r["copy_of_4.8TBps"] = copy["of_4.8TBps"] if copy else None
    r["row_kernels"], r["gemms"] = rows, gemms
    best_mfu = (km.get(best) or {}).get("mfu") if best else None
    ge = lambda v, t: None if v is None else v >= t  # noqa: E731
    row_ok = [x["of_copy_kernel"] for x in rows if x["of_copy_kernel"] is not None]
    r["goals"] = {"compiled >= 1.5x Kiln eager": ge(r["compiled_over_eager_speedup"], 1.5),
                  "compiled >= 1.1x torch.compile": ge(r["compiled_over_torch_compile_speedup"], 1.1),
                  "fused row kernels >= 80% of copy": ge(min(row_ok), 0.80) if row_ok else None,
                  "MFU >= 40% (bf16 autocast)": ge(best_mfu, 0.40)}
    return r


def main():
    if sys.argv[1:2] == ["--gpt"]:
        kiln = json.load(open(sys.argv[2]))
        torch = None
        if len(sys.argv) > 3:
            try:
                torch = json.load(open(sys.argv[3]))
            except (OSError, ValueError) as e:
                print(f"report: no torch numbers ({e})", file=sys.stderr)
        print(json.dumps(gpt_report(kiln, torch), indent=2))
        return
    kiln, torch = (json.load(open(p)) for p in sys.argv[1:3])
    peer = {c["name"]: c for c in torch["cases"]}
    copy = next(c for c in kiln["cases"] if c["name"] == "copy_f32")
    rows = []
    for c in kiln["cases"]:
        r = {"name": c["name"], "kiln_ms": c["ms"]}
        if c["name"] in peer:
            r["torch_ms"] = peer[c["name"]]["ms"]
            r["kiln_over_torch_time"] = c["ms"] / peer[c["name"]]["ms"]
        if "GBps" in c:
            r["kiln_GBps"] = c["GBps"]
            r["of_copy_kernel"] = c["GBps"] / copy["GBps"]
            r["of_4.8TBps"] = c["GBps"] * 1e9 / H200_BYTES_PER_S
        if "TFLOPs" in c:
            r["kiln_TFLOPs"] = c["TFLOPs"]
            if c["name"] in peer:
                r["torch_TFLOPs"] = peer[c["name"]]["TFLOPs"]
        rows.append(r)
    goals = {}
    for name in ("add_f32", "mul_add_f32", "exp_f32"):
        row = next((r for r in rows if r["name"] == name), None)
        if row:
            goals[f"{name} >= 70% of copy"] = row["of_copy_kernel"] >= 0.70
    gemm = next((r for r in rows if r["name"].startswith("gemm_bf16")), None)
    if gemm:
        goals["bf16 GEMM >= 600 TFLOP/s"] = gemm["kiln_TFLOPs"] >= 600
    print(json.dumps({"device": kiln["device"], "peer": torch["library"], "small": kiln.get("small", False),
                      "cases": rows, "goals": goals}, indent=2))


if __name__ == "__main__":
    main()
