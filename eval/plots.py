"""The report's figures, drawn from `metrics.json` alone (so they can be redrawn without re-judging).

Each function draws one PNG and returns False when the metrics hold nothing to draw.
"""

from __future__ import annotations

import os

from stepcritic.eval.best_of_n import REFERENCES, SELECTORS


def _plt():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    _plt().close(fig)


def _bars(ax, xs, values, width, label) -> None:
    """Bars for the defined values; an undefined one (None) gets no bar and a "–" at zero, never a bar of 0."""
    ax.bar(xs, [float("nan") if v is None else v for v in values], width, label=label)
    for x, v in zip(xs, values):
        if v is None:
            ax.text(x, 0, "–", ha="center", va="bottom", fontsize=8)


def _critiques(metrics: dict) -> dict:
    return {name: r["overall"]["critique"] for name, r in metrics["judges"].items() if "critique" in r["overall"]}


def step_prf(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(critiques)), 3.5))
    width = 0.8 / 3
    for k, label in enumerate(("precision", "recall", "f1")):
        xs = [i + (k - 1) * width for i in range(len(critiques))]
        _bars(ax, xs, [None if c["step"][label] is None else 100 * c["step"][label] for c in critiques.values()],
              width, label)
    ax.set_xticks(range(len(critiques)), list(critiques), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("x100 (incorrect step = positive)")
    ax.set_title("Step-level critique")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def confusion(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(critiques), figsize=(3.2 * len(critiques), 3.2), squeeze=False)
    for ax, (name, c) in zip(axes[0], critiques.items()):
        cm = c["confusion"]
        table = [[cm["tn"], cm["fp"]], [cm["fn"], cm["tp"]]]  # rows: gold correct / incorrect
        ax.imshow(table, cmap="Blues")
        dark = max(max(row) for row in table) / 2
        for i in range(2):
            for j in range(2):
                ax.text(j, i, str(table[i][j]), ha="center", va="center",
                        color="white" if table[i][j] > dark else "black")
        ax.set_xticks([0, 1], ["judged ok", "flagged"])
        ax.set_yticks([0, 1], ["gold ok", "gold wrong"])
        ax.set_title(name, fontsize=8)
    _save(fig, path)
    return True


def shiftcheck_positions(metrics: dict, path: str) -> bool:
    """Where each judge's picks land on failed ShiftCheck questions (flat = no position preference)."""
    dists = {}
    for name, r in metrics["judges"].items():
        by_n = (r["overall"].get("shiftcheck") or {}).get("position_distribution_by_n_options") or {}
        if by_n:
            n = max(by_n, key=int)
            dists[f"{name} ({n} options)"] = by_n[n]
    if not dists:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(dists)), 3.5))
    letters = sorted({letter for d in dists.values() for letter in d})
    width = 0.8 / len(letters)
    for k, letter in enumerate(letters):
        xs = [i + (k - (len(letters) - 1) / 2) * width for i in range(len(dists))]
        ax.bar(xs, [d.get(letter, 0) for d in dists.values()], width, label=letter)
    ax.set_xticks(range(len(dists)), list(dists), rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("% of picks")
    ax.set_title("ShiftCheck position of picks (failed questions)")
    ax.legend(title="position", fontsize=8)
    _save(fig, path)
    return True


def somers_d(metrics: dict, path: str) -> bool:
    critiques = _critiques(metrics)
    if not critiques:
        return False
    # a level no judge has a value at (RPTS without premise annotations, say) would only draw empty bars
    levels = sorted({level for c in critiques.values() for level, corr in c["correlation"].items()
                     if corr.get("d") is not None})
    if not levels:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(critiques)), 3.5))
    width = 0.8 / len(levels)
    for k, level in enumerate(levels):
        xs = [i + (k - (len(levels) - 1) / 2) * width for i in range(len(critiques))]
        _bars(ax, xs, [(c["correlation"].get(level) or {}).get("d") for c in critiques.values()], width, level)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(critiques)), list(critiques), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(-1, 1)
    ax.set_ylabel("Somers' D (judge | human)")
    ax.legend(fontsize=8)
    _save(fig, path)
    return True


def calibration(metrics: dict, path: str) -> bool:
    curves = {name: c["calibration"] for name, c in _critiques(metrics).items()
              if (c.get("calibration") or {}).get("brier") is not None}
    if not curves:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect")
    for name, curve in curves.items():
        ax.plot(curve["mean_predicted"], curve["fraction_incorrect"], marker="o",
                label=f"{name} (Brier {curve['brier']:.3f})")
    ax.set_xlabel("predicted P(step incorrect)")
    ax.set_ylabel("observed share incorrect")
    ax.set_title("Calibration")
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


def threshold_sweep(metrics: dict, path: str) -> bool:
    """Step F1 against the threshold on P(incorrect), each judge's test chains (solid) and dev chains (dashed), a
    dotted line at the threshold the dev chains chose."""
    curves = {name: c["step"]["sweep"] for name, c in _critiques(metrics).items()
              if (c["step"].get("sweep") or {}).get("curve")}
    if not curves:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 4))
    for k, (name, sweep) in enumerate(curves.items()):
        color = f"C{k % 10}"
        curve = sweep["curve"]
        for part, style in (("test", "-"), ("dev", "--")):
            ax.plot(curve["thresholds"], [float("nan") if v is None else 100 * v for v in curve[part]], style,
                    color=color, label=f"{name} ({part})", linewidth=1.2)
        ax.axvline(sweep["threshold"], color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("threshold on P(step incorrect) = 1 - step score")
    ax.set_ylabel("step F1 x100")
    ax.set_ylim(0, 100)
    ax.set_title("Threshold sweep (dotted: chosen on dev)")
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


def best_of_n(metrics: dict, path: str) -> bool:
    """Accuracy of the picked answer against N: every judge's selectors, and random pick, majority vote and the
    oracle (the same for every judge, drawn once)."""
    sections = {name: r["overall"]["best-of-n"] for name, r in metrics["judges"].items()
                if (r["overall"].get("best-of-n") or {}).get("ns")}
    if not sections:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    first = next(iter(sections.values()))
    ns = first["ns"]
    markers = {"chain": "o", "min": "v", "mean": "s", "last": "^"}
    for k, (name, sec) in enumerate(sections.items()):
        for selector in SELECTORS:
            values = [sec["curve"][selector].get(str(n)) for n in ns]
            if any(v is not None for v in values):
                ax.plot(ns, [float("nan") if v is None else 100 * v for v in values], marker=markers[selector],
                        color=f"C{k % 10}", linewidth=1.2, label=f"{name} {selector}")
    for ref, style in zip(REFERENCES, ("--", "-.", ":")):
        ax.plot(ns, [float("nan") if v is None else 100 * v for v in (first["curve"][ref].get(str(n)) for n in ns)],
                style, color="black", linewidth=1, label=ref)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.set_xlabel("N (candidate chains per question)")
    ax.set_ylabel("accuracy of the picked answer x100")
    ax.set_ylim(0, 100)
    ax.set_title("Best-of-N")
    ax.legend(fontsize=6, ncol=2)
    _save(fig, path)
    return True


def correction(metrics: dict, path: str) -> bool:
    """VISCO's PCR and NCR (x100) per judge, after the gold critique and after its own; "–" where undefined."""
    sections = {name: r["overall"]["correction"] for name, r in metrics["judges"].items()
                if "correction" in r["overall"]}
    if not sections:
        return False
    plt = _plt()
    fig, ax = plt.subplots(figsize=(max(5, 1.8 * len(sections)), 3.6))
    bars = [(setting, rate) for setting in ("gold", "own") for rate in ("pcr", "ncr")]
    width = 0.8 / len(bars)
    for k, (setting, rate) in enumerate(bars):
        xs = [i + (k - (len(bars) - 1) / 2) * width for i in range(len(sections))]
        _bars(ax, xs, [None if sec[setting][rate] is None else 100 * sec[setting][rate] for sec in sections.values()],
              width, f"{rate.upper()} ({setting} critique)")
    ax.set_xticks(range(len(sections)), list(sections), rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 100)
    ax.set_ylabel("x100")
    ax.set_title("Correction (PCR: wrong made right; NCR: right made wrong)")
    ax.legend(fontsize=7)
    _save(fig, path)
    return True


PLOTS = {"step_prf": step_prf, "confusion": confusion, "shiftcheck_positions": shiftcheck_positions,
         "somers_d": somers_d, "calibration": calibration, "threshold_sweep": threshold_sweep,
         "best_of_n": best_of_n, "correction": correction}


def write_plots(metrics: dict, plot_dir: str) -> list[str]:
    """Draw every plot that has data; returns the names drawn (files `plot_dir/NAME.png`)."""
    os.makedirs(plot_dir, exist_ok=True)
    return [name for name, draw in PLOTS.items() if draw(metrics, os.path.join(plot_dir, f"{name}.png"))]
