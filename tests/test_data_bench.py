"""`python -m stepcritic.bench.data_stage` runs every stage for each N and reports them (a smoke run on a few chains;
the benchmark's own numbers are in docs/benchmarks.md)."""

import json

from stepcritic.bench import data_stage as bench

# each stage a fresh `python -m stepcritic` on 6 or 12 chains: 1.0-1.6 s on a loaded 2-core AMD EPYC with AVX-512
MAX_STAGE_SECONDS = 10


def test_bench_reports_each_stage_for_each_n_and_the_time_ratio(tmp_path, capsys):
    report_path = tmp_path / "report.json"
    args = bench.make_parser().parse_args(["--n", "12", "6", "--kinds", "prm-sft", "outcome-rm",
                                           "--workdir", str(tmp_path / "work"), "--json", str(report_path)])
    assert bench.main(args) == 0
    report = json.loads(report_path.read_text())
    assert [run["n_chains"] for run in report["runs"]] == [6, 12]  # smallest first: the ratio's denominator
    for run in report["runs"]:
        assert [s["stage"] for s in run["stages"]] == ["synth", "ingest", "build/prm-sft", "build/outcome-rm"]
        assert run["canonical_jsonl"]["chains"] == run["n_chains"]
        assert all(s["ok"] and s["peak_rss_mib"] > 50 and s["chains_per_s"] >= run["n_chains"] / MAX_STAGE_SECONDS
                   and 0 < s["cpu_seconds"] for s in run["stages"])
    assert report["scaling"]["n_ratio"] == 2 and set(report["scaling"]["time_ratio"]) == {
        "synth", "ingest", "build/prm-sft", "build/outcome-rm"}
    out = capsys.readouterr().out
    assert set(report["scaling"]["cpu_ratio"]) == set(report["scaling"]["time_ratio"])
    lines = out.splitlines()
    assert "N = 12:" in out and "CPU time ratio" in out
    scaling = report["scaling"]
    assert any(line.startswith(f"time ratio N=12 / N=6 (N ratio {scaling['n_ratio']}): ")
               and line.endswith(f"; all stages {scaling['total_time_ratio']}") for line in lines)
    largest = report["runs"][-1]["peak_rss_mib"]
    assert lines[-1] == f"peak RSS at N=12: {largest} MiB (under the 2 GB target)"  # the figure the JSON holds


def test_bench_refuses_a_chain_count_below_one(capsys):
    assert bench.main(bench.make_parser().parse_args(["--n", "0"])) == 2
    assert "--n takes positive chain counts" in capsys.readouterr().err
