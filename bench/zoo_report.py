"""The model zoo's Markdown table and PNG chart (used by bench/zoo.py).

markdown_table(doc, regressed) -> str; write_chart(doc, regressed, path).
`doc` is bench/results/zoo.json's content; `regressed` the set of
"model/metric" names compare.py flagged (marked in both).
"""

# Speedups (x: > 1 is Kiln faster): key, label, the issue's goal (None: no goal).
RATIOS = [("compiled_vs_eager", "compiled / Kiln eager", 1.5),
          ("compiled_vs_torch_compile", "compiled / torch.compile", 1.2),
          ("eager_vs_libtorch_eager", "Kiln eager / LibTorch eager", 1.0),
          ("compiled_vs_libtorch_eager", "compiled / LibTorch eager", None),
          ("eager_vs_torch_eager", "Kiln eager / torch 2 eager", None)]
STEP_TIMES = [("kiln_eager_ms", "Kiln eager"), ("kiln_compiled_ms", "Kiln compiled"),
              ("libtorch_eager_ms", "LibTorch 1.13 eager"), ("torch_eager_ms", "torch 2 eager"),
              ("torch_compile_ms", "torch.compile")]


def _fmt(value, spec, regressed=False, unit=""):
    if value is None:
        return "-"
    text = format(value, spec) + unit
    return f"**{text}** (regression)" if regressed else text


def markdown_table(doc, regressed=frozenset()):
    """Step times, speedups (x: > 1 is Kiln faster), compile times, graphs and peaks per model."""
    head = ("| model | Kiln eager | Kiln compiled | LibTorch eager | torch 2 eager | torch.compile | compiled/eager | "
            "vs torch.compile | eager vs LibTorch eager | compiled vs LibTorch eager | eager vs torch 2 eager | "
            "Kiln cold / warm compile | Inductor cold / warm | "
            "Kiln graphs / breaks | torch graphs / breaks | Kiln peak/step eager / compiled |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for name, m in doc["models"].items():
        bad = {key.split("/", 1)[1] for key in regressed if key.startswith(name + "/")}
        ms = [_fmt(m.get(key), ".2f", key in bad, " ms") for key, _ in STEP_TIMES]
        ratios = [_fmt(m.get(key), ".2f", unit="x") for key, _, _ in RATIOS]
        compile_k = f"{_fmt(m.get('kiln_cold_compile_s'), '.2f', 'kiln_cold_compile_s' in bad)} / " \
                    f"{_fmt(m.get('kiln_warm_compile_s'), '.2f', 'kiln_warm_compile_s' in bad)} s"
        compile_t = f"{_fmt(m.get('inductor_cold_compile_s'), '.2f')} / {_fmt(m.get('inductor_warm_compile_s'), '.2f')} s"
        graphs_k = f"{m.get('graphs', '-')} / {_fmt(m.get('graph_breaks'), 'd', 'graph_breaks' in bad)}"
        graphs_t = f"{m.get('torch_graphs', '-')} / {m.get('torch_graph_breaks', '-')}"
        peaks = f"{_fmt(_mb(m.get('kiln_eager_peak_step_bytes')), '.1f')} / " \
                f"{_fmt(_mb(m.get('kiln_compiled_peak_step_bytes')), '.1f', 'kiln_compiled_peak_step_bytes' in bad)} MB"
        lines.append("| " + " | ".join([name] + ms + ratios + [compile_k, compile_t, graphs_k, graphs_t, peaks]) + " |")
    return "\n".join(lines) + "\n"


def _mb(value):
    return None if value is None else value / 1e6


def write_chart(doc, regressed, path):
    """Two panels: step time per model and variant (log scale, regressions
    outlined red), and the speedups against the goals (dashed lines)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["models"])
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 8))
    width = 0.8 / len(STEP_TIMES)
    for i, (key, label) in enumerate(STEP_TIMES):
        xs = [j + (i - (len(STEP_TIMES) - 1) / 2) * width for j in range(len(names))]
        values = [doc["models"][n].get(key) or 0 for n in names]
        bars = top.bar(xs, values, width, label=label)
        for bar, name in zip(bars, names):
            if f"{name}/{key}" in regressed:
                bar.set_edgecolor("red")
                bar.set_linewidth(2.5)
                top.annotate("regression", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                             ha="center", va="bottom", color="red", fontsize=8)
    step_keys = {key for key, _ in STEP_TIMES}
    for j, name in enumerate(names):  # regressions that have no bar: compile times, peak, graph breaks
        others = sorted(k.split("/", 1)[1] for k in regressed if k.startswith(name + "/") and
                        k.split("/", 1)[1] not in step_keys)
        if others:
            top.annotate("regressed: " + ", ".join(others), (j, 0.97), xycoords=("data", "axes fraction"),
                         ha="center", va="top", color="red", fontsize=8)
    top.set_yscale("log")
    top.set_ylabel("training step (ms, log)")
    top.set_xticks(range(len(names)), names)
    top.legend(fontsize=8)
    width = 0.8 / len(RATIOS)
    for i, (key, label, goal) in enumerate(RATIOS):
        xs = [j + (i - (len(RATIOS) - 1) / 2) * width for j in range(len(names))]
        values = [doc["models"][n].get(key) or 0 for n in names]
        bars = bottom.bar(xs, values, width, label=label + (f" (goal {goal}x)" if goal else ""))
        if goal:
            bottom.axhline(goal, color=bars.patches[0].get_facecolor(), linestyle="--", linewidth=1)
    bottom.set_ylabel("speedup (x, > 1: Kiln faster)")
    bottom.set_xticks(range(len(names)), names)
    bottom.legend(fontsize=8)
    meta = doc.get("meta", {})
    fig.suptitle(f"Kiln model zoo, {meta.get('date', '')}, {meta.get('threads', '?')} threads, "
                 f"load {meta.get('load_average_start', '?')}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
