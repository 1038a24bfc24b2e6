"""The data-stage benchmark runs end to end on a few chains and reports every stage (its numbers are the README's)."""

import json

from stepcritic.bench import data


def test_data_benchmark_reports_each_stage(capsys, tmp_path):
    assert data.main(["--n", "12", "--kinds", "prm-sft", "outcome-rm", "--workdir", str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [s["stage"] for s in report["stages"]] == ["synth", "ingest", "build/prm-sft", "build/outcome-rm"]
    assert report["canonical_jsonl"]["chains"] == 12 and all(s["ok"] for s in report["stages"])
    assert all(s["peak_rss_mib"] > 0 and s["chains_per_s"] > 0 for s in report["stages"])
