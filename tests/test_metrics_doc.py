"""docs/metrics.md is generated from the metric registry: the committed glossary cannot drift from what
`stepcritic eval` computes, and `python -m stepcritic.eval.metrics_doc --check` tells a stale file from a fresh one."""

import os

from stepcritic.eval import metrics_doc
from stepcritic.eval.tasks import METRICS, TASKS

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(REPO, "docs", "metrics.md")


def test_committed_glossary_is_the_generated_one():
    with open(DOC, encoding="utf-8") as f:
        committed = f.read()
    assert committed == metrics_doc.render(), "docs/metrics.md is stale: run python -m stepcritic.eval.metrics_doc"


def test_every_metric_has_a_row_in_its_task_section():
    text = metrics_doc.render()
    sections = {name: text.index(f"\n## {name}\n") for name in TASKS}
    ends = sorted(sections.values()) + [len(text)]
    for m in METRICS.values():
        start = sections[m.task]
        section = text[start:ends[ends.index(start) + 1]]
        assert f"| `{m.key}` |" in section, (m.name, m.task)
        assert f"- **{m.display.replace('{matcher}', 'MATCHER')}**: {m.description}" in section, m.name


def test_direction_and_headline_come_from_the_registry():
    text = metrics_doc.render()
    for m in METRICS.values():
        row = next(line for line in text.splitlines() if f"| `{m.key}` |" in line and line.startswith(
            f"| {metrics_doc._cell(m.display.replace('{matcher}', 'MATCHER'))} |"))
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert cells[2] == {True: "higher", False: "lower", None: "none"}[m.higher_is_better], m.name
        assert cells[-1] == ("yes" if m.headline else ""), m.name


def test_check_tells_a_stale_file_from_a_fresh_one(tmp_path, capsys):
    path = tmp_path / "metrics.md"
    assert metrics_doc.main(["--check", "--out", str(path)]) == 1  # missing
    path.write_text(metrics_doc.render().replace("Step F1", "Step F2"), encoding="utf-8")
    assert metrics_doc.main(["--check", "--out", str(path)]) == 1  # edited by hand
    assert "out of date" in capsys.readouterr().err
    assert metrics_doc.main(["--out", str(path)]) == 0
    assert path.read_text(encoding="utf-8") == metrics_doc.render()
    assert metrics_doc.main(["--check", "--out", str(path)]) == 0
