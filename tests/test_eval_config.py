"""`evaluate(config)` and the older `evaluate(chains, judges, out_dir, ...)` that scripts call run the same job."""

import helpers
import pytest

from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.eval.config import DEFAULT_TASKS, EvalConfig
from stepcritic.eval.judges.registry import build_judge
from stepcritic.eval.runner import evaluate


@pytest.fixture
def chains(tmp_path):
    path = str(tmp_path / "chains")
    save_chains([validate_chain(c) for c in helpers.chains(6)], path)
    return path


def test_the_older_call_writes_what_a_config_writes(chains, tmp_path):
    judges = [build_judge("always-correct"), build_judge("random,rate=0.3,seed=0")]
    quiet = {"progress": False, "log": lambda line: None}
    evaluate(chains, judges, str(tmp_path / "old"), tasks=("critique", "choice"), **quiet)
    evaluate(EvalConfig(chains, judges, str(tmp_path / "new"), tasks=("critique", "choice"), **quiet))
    for output in ("metrics.json", "report.md", "predictions.jsonl"):
        assert (tmp_path / "old" / output).read_bytes() == (tmp_path / "new" / output).read_bytes(), output


def test_a_config_is_the_only_argument(chains, tmp_path):
    config = EvalConfig(chains, [build_judge("always-correct")], str(tmp_path / "out"))
    assert tuple(config.tasks) == DEFAULT_TASKS
    with pytest.raises(TypeError, match="set them in the EvalConfig"):
        evaluate(config, tasks=("critique",))
