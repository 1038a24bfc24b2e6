"""The report's figures, drawn from `metrics.json` alone (so they can be redrawn without re-judging).

Each task declares its plots (`Task.plots`, in its module) and draws them with the helpers here; `write_plots` draws
those of every registered task. matplotlib is imported only when a plot is drawn.
"""

from __future__ import annotations

import os

from stepcritic.eval.tasks.base import TASKS

# metrics.json's `plots` list and the report's Plots section keep this order (ShiftCheck's among the critique task's);
# a plot not named here follows them, in registry order
ORDER = ("step_prf", "confusion", "shiftcheck_positions", "somers_d", "calibration", "threshold_sweep", "best_of_n",
         "correction")


def pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def save(fig, path: str) -> None:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    pyplot().close(fig)


def bars(ax, xs, values, width, label) -> None:
    """Bars for the defined values; an undefined one (None) gets no bar and a "–" at zero, never a bar of 0."""
    ax.bar(xs, [float("nan") if v is None else v for v in values], width, label=label)
    for x, v in zip(xs, values):
        if v is None:
            ax.text(x, 0, "–", ha="center", va="bottom", fontsize=8)


def write_plots(metrics: dict, plot_dir: str) -> list[str]:
    """Draw every registered plot that has data; returns the names drawn (files `plot_dir/NAME.png`)."""
    os.makedirs(plot_dir, exist_ok=True)
    draws = {name: draw for task in TASKS.values() for name, draw in task.plots.items()}
    names = sorted(draws, key=lambda name: ORDER.index(name) if name in ORDER else len(ORDER))
    return [name for name in names if draws[name](metrics, os.path.join(plot_dir, f"{name}.png"))]
