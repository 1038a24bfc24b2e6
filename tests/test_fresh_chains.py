"""experiments.fresh_chains: the chains kept are those no training source showed, and the table reads metrics.json."""

import json


def test_chains_of_a_seen_scene_are_dropped_and_counted(tmp_path):
    from stepcritic.data_prep.schema import load_chains
    from stepcritic.data_prep.synth import synthesize_to_disk
    from stepcritic.experiments.fresh_chains import _chain_scenes, keep_unseen

    synthesize_to_disk(30, 11, str(tmp_path / "synth"))
    keys = _chain_scenes(str(tmp_path / "synth"))
    seen = {"pre-training": {keys[0]}, "training": {keys[0], keys[-1]}}  # a scene two sources hold counts once
    counts = keep_unseen(str(tmp_path / "synth"), str(tmp_path / "kept"), seen)
    first, last = keys.count(keys[0]), keys.count(keys[-1])
    assert counts == {"chains_in": 30, "dropped": {"pre-training": first, "training": last},
                      "kept": 30 - first - last}
    kept = load_chains(str(tmp_path / "kept"), decode_images=False)
    assert len(kept) == counts["kept"] and not {keys[0], keys[-1]} & set(_chain_scenes(str(tmp_path / "kept")))


def _step(f1, auroc):
    return {"f1": f1, "f1_ci": [f1 - 0.05, f1 + 0.05], "auroc": auroc, "auroc_ci": [auroc - 0.03, auroc + 0.02]}


def test_each_prm_is_held_to_the_targets_and_the_draws_to_their_spread():
    from stepcritic.experiments.fresh_chains import render, summary, targets

    def judge(f1, auroc, relation):
        kinds = {"colour": _step(0.9, 0.97), "relation": _step(0.8, relation)}
        return {"overall": {"critique": {"step": _step(f1, auroc)}},
                "breakdowns": {"step_kind": {k: {"critique": {"step": v}} for k, v in kinds.items()}}}
    metrics = {"judges": {"prm:a": judge(0.83, 0.95, 0.88), "prm:b": judge(0.84, 0.94, 0.84)}}
    rows = summary(metrics, {"demo's PRM": "prm:a", "draw 1": "prm:b"})
    assert rows["draw 1"]["kinds"]["relation"] == {"auroc": 0.84, "auroc_ci": [0.81, 0.86]}
    checks = targets(rows)
    assert [c.get("every_kind") for c in checks[:2]] == [True, False]  # 0.84 on relation misses 0.85
    assert checks[2] == {"relation_spread": 0.04, "met": False}
    text = render(rows, checks, {"colour": 10, "relation": 5}, {"n": 2000})
    assert "| demo's PRM | 0.830 [0.78, 0.88] | 0.950 [0.92, 0.97] | 0.970" in text
    assert "relation AUROC spread across draws: 0.04: **not met**" in text
    json.dumps(checks)  # results.json holds them as they are
