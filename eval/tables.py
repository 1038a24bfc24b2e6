"""The markdown pieces of `report.md` that every task's part is drawn with: numbers in the papers' style and a
table of the registered metrics, one row per judge."""

from __future__ import annotations

from stepcritic.eval.tasks import base as T


def columns(tasks, table: str = "leaderboard", levels=None) -> list[T.Metric]:
    """The registered metrics of `tasks` shown in `table`, optionally only those of some levels."""
    return [m for m in T.metrics_for(tasks, table) if levels is None or m.level in levels]


def number(value: float, scale: int) -> str:
    return f"{value * scale:.{1 if scale == 100 else 2}f}"


def number_or_dash(value, scale: int = 100) -> str:
    return "–" if value is None else number(value, scale)


def cell(value, ci, scale: int, bold: bool) -> str:
    """"53.0 [47.0, 59.0]": the value (bold when best) and its interval; "–" when undefined, never bold."""
    if value is None:
        return "–"
    text = number(value, scale)
    text = f"**{text}**" if bold else text
    return f"{text} [{number(ci[0], scale)}, {number(ci[1], scale)}]" if ci else text


def leaderboard(sections: dict, tasks, matcher_name: str, metrics: list[T.Metric] | None = None) -> str:
    """A markdown table, one row per judge; the best value of each column in bold."""
    cols = [m for m in (columns(tasks) if metrics is None else metrics) if m.task in tasks]
    values = {name: [T.lookup(sec, m) for m in cols] for name, sec in sections.items()}
    best = []
    for j, m in enumerate(cols):
        shown = [round(v[j] * m.scale, 1) for v in values.values() if v[j] is not None]
        if m.higher_is_better is None or len(set(shown)) < 2:  # no direction, or nothing to single out
            best.append(None)
        else:
            best.append((max if m.higher_is_better else min)(shown))
    lines = ["| Judge | " + " | ".join(m.display.format(matcher=matcher_name) for m in cols) + " |",
             "|---" * (len(cols) + 1) + "|"]
    for name, sec in sections.items():
        row = [cell(v, T.lookup(sec, m, ci=True), m.scale, top is not None and v is not None
                    and round(v * m.scale, 1) == top) for v, m, top in zip(values[name], cols, best)]
        lines.append(f"| `{name}` | " + " | ".join(row) + " |")
    return "\n".join(lines)
