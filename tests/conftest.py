import os
import sys

import pytest

# Tests never touch the network: tiny models are built from configs, tokenizers offline.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
sys.path.insert(0, os.path.dirname(__file__))

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("STEPCRITIC_SHARED", os.path.join(os.path.dirname(REPO), "shared"))
MICEVAL_JSONL = os.path.join(SHARED, "data", "miceval", "dataset", "MiCEval_Normal.jsonl")


@pytest.fixture
def miceval_jsonl():
    if not os.path.exists(MICEVAL_JSONL):
        pytest.skip(f"shared MiCEval data not present at {MICEVAL_JSONL}")
    return MICEVAL_JSONL


@pytest.fixture(scope="module")
def one_torch_thread():
    """The tiny critic's matrices are too small to gain from a second thread, and on shared cores two spinning
    threads ran a training step 5-15x slower than one (measured on the 2-core machine under load)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def private_tiny_cache(tmp_path_factory):
    """A module's own STEPCRITIC_CACHE, so its tiny builds neither reuse nor leave behind the user's cache; a module
    opts in with `pytestmark = pytest.mark.usefixtures("private_tiny_cache")`."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("STEPCRITIC_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="session")
def tiny_prm(tmp_path_factory):
    """A tiny PRM folder (`prm:DIR`) after 2 training steps on hand-made chains: its scores mean little, but they
    are the scores of a real trained artifact, for the tests of what consumes them (rewards, the server)."""
    from helpers import train_tiny

    return train_tiny(tmp_path_factory.mktemp("tiny-prm"), "prm", "prm-sft")
