"""A PRM loads and scores without transformers' noise on stderr: no weight-loading bar for a local folder, and no
"`max_length` is ignored" warning from the truncation a trainer saved in the tokenizer."""

import os
import subprocess
import sys

SCRIPT = """
import sys
from helpers import chains
from stepcritic.data_prep.schema import validate_chain
from stepcritic.train.scoring import PRMScorer

scorer = PRMScorer.from_pretrained(sys.argv[1], batch_size=2)
given = [validate_chain(c) for c in chains(3)]
scores = scorer.score(given)
print(len(scores) == len(given) > 0, scorer.processor.tokenizer.init_kwargs.get("max_length"))
"""


def test_a_prm_load_and_its_scores_write_nothing_to_stderr(tiny_prm):
    # protects: every load printed a "Loading weights" bar and every batch "`max_length` is ignored when `padding`=
    # `True`..." (the training's max_length, saved in tokenizer.json, handed to each call)
    with open(os.path.join(tiny_prm, "tokenizer.json")) as f:
        assert '"max_length": 1024' in f.read()  # the saved truncation this test is about is there
    tests = os.path.dirname(os.path.abspath(__file__))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "default"}
    done = subprocess.run([sys.executable, "-c", SCRIPT, tiny_prm], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "None"]
    for noise in ("Loading weights", "it/s]", "`max_length` is ignored", "Warning"):
        assert noise not in done.stderr, done.stderr
