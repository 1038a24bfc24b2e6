"""Long chains through a PRM: a note-writing PRM reads each step once (its model calls and the tokens they read grow
linearly with the steps), and a chain past the step limit is one line and exit 2 wherever it arrives."""

import pytest
from helpers import chain, step

import stepcritic.cli as stepcritic_cli
from stepcritic.data_prep.schema import save_chains, validate_chain
from stepcritic.train.limits import MAX_STEPS, TooManySteps

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NOTE_TOKENS = 3  # an untrained note runs to the cap: a small one keeps every step the same size, and the test short


def long_chain(n: int, chain_id: str = "long") -> dict:
    texts = ["The circle is red.", "The circle is at the top left.", "The square is blue.", "So the answer is red."]
    return validate_chain(chain(chain_id, steps=[step(texts[k % len(texts)]) for k in range(n)]))


@pytest.fixture(scope="module")
def notes_scorer(tiny_prm):
    """The tiny PRM, marked as writing notes: the config flag is all the scorer reads to score step by step."""
    from stepcritic.train.loading import load_critic
    from stepcritic.train.scoring import PRMScorer

    model, processor = load_critic(tiny_prm, dtype="float32", merged=True)
    model.config.stepcritic_prm_notes = True
    scorer = PRMScorer(model, processor)
    scorer.MAX_NOTE_TOKENS = NOTE_TOKENS
    assert scorer.notes is True
    return scorer


def counted(scorer, chains):
    """Score `chains`, counting the model's generate calls and, per generate call (one a step), the tokens every
    forward pass of that step read."""
    model = scorer.model
    per_step, generates = [], []

    def before_forward(module, args, kwargs):
        if per_step:
            per_step[-1] += kwargs["input_ids"].numel()

    real_generate = model.generate

    def generate(*args, **kwargs):
        generates.append(1)
        per_step.append(0)
        return real_generate(*args, **kwargs)

    hook = model.register_forward_pre_hook(before_forward, with_kwargs=True)
    model.generate = generate
    try:
        scores = scorer.score(chains)
    finally:
        hook.remove()
        del model.generate
    return scores, len(generates), per_step


def test_a_note_writing_prm_reads_each_step_once_so_its_model_calls_grow_linearly(notes_scorer):
    # protects: every step re-read the whole conversation before it (image included), so a 200-step chain read
    # ~100x more tokens per step than a 10-step one and never finished
    short, long = long_chain(8, "short"), long_chain(64)
    (short_scores,), short_generates, short_reads = counted(notes_scorer, [short])
    (long_scores,), long_generates, long_reads = counted(notes_scorer, [long])
    assert (short_generates, long_generates) == (8, 64)  # one generation per step, no more
    assert len(short_scores) == 8 and len(long_scores) == 64 and all(0.0 <= p <= 1.0 for p in long_scores)
    # the first step reads the image and the question; after it, a step reads its own turn, the note written and the
    # note read, the same wherever it lies in the chain
    later_short = sum(short_reads[1:]) / 7
    later_long = sum(long_reads[1:]) / 63
    assert later_long <= 1.2 * later_short, (short_reads, long_reads)
    assert sum(long_reads[-16:]) <= 1.2 * sum(long_reads[1:17]), long_reads  # no growth along the chain


def test_the_cache_changes_no_note_and_no_score(notes_scorer, monkeypatch):
    # the cached reading must equal reading each step's whole prompt afresh, as the scorer did before
    from stepcritic.train import scoring

    chains = [long_chain(6, "a"), long_chain(3, "b")]
    cached = notes_scorer.score(chains)
    cached_notes = notes_scorer.last_notes
    monkeypatch.setattr(scoring._Context, "common_start", lambda self, ids, limit: 0)  # read every prompt afresh
    fresh = notes_scorer.score(chains)
    assert notes_scorer.last_notes == cached_notes and [len(n) for n in cached_notes] == [6, 3]
    assert [len(row) for row in fresh] == [6, 3]
    assert all(abs(a - b) < 1e-5 for ra, rb in zip(cached, fresh) for a, b in zip(ra, rb)), (cached, fresh)


def test_a_chain_past_the_step_limit_is_refused_naming_the_chain_and_its_steps(notes_scorer):
    notes_scorer.score([long_chain(2, "fits")])
    with pytest.raises(TooManySteps, match=rf"^chain 'too-long': steps: {MAX_STEPS + 1} steps, more than the "
                                           rf"{MAX_STEPS} a critic scores"):
        notes_scorer.score([long_chain(2, "fits"), long_chain(MAX_STEPS + 1, "too-long")])


def test_eval_stops_at_a_chain_past_the_step_limit_with_one_line_and_exit_2(tiny_prm, tmp_path, capsys):
    chains = str(tmp_path / "chains")
    save_chains([long_chain(3, "short"), long_chain(MAX_STEPS + 1, "too-long")], chains)
    code = stepcritic_cli.main(["eval", "--chains", chains, "--judge", f"prm:{tiny_prm}", "--tasks", "critique",
                                "--no-progress", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "error" in line]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("stepcritic eval: error: ")
    assert f"chain 'too-long': steps: {MAX_STEPS + 1} steps, more than the {MAX_STEPS}" in lines[0]


def test_serve_takes_its_step_limit_from_the_same_rule(capsys):
    from stepcritic.serve.cli import make_parser
    from stepcritic.serve.settings import Settings

    assert make_parser().parse_args(["--judge", "always-correct"]).max_steps == MAX_STEPS
    assert Settings(judge_spec="always-correct").max_steps == MAX_STEPS
    code = stepcritic_cli.main(["serve", "--judge", "always-correct", "--max-steps", str(MAX_STEPS + 1)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"stepcritic serve: error: --max-steps {MAX_STEPS + 1}: more than the {MAX_STEPS} steps")


def test_grouped_attention_copies_no_cached_key_and_changes_no_score(notes_scorer, monkeypatch):
    # protects: every step after the first copied the whole cache once per query-head group (transformers'
    # repeat_kv under a mask), a cost that grew with the chain at every step
    import os

    from transformers.integrations import sdpa_attention

    from stepcritic.train import scoring

    copies = []
    real_repeat = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda x, n: copies.append(n) or real_repeat(x, n))
    monkeypatch.delenv("TRANSFORMERS_SDPA_FORCE_GQA", raising=False)
    chains = [long_chain(6, "a")]
    grouped = notes_scorer.score(chains)
    assert copies == [] and "TRANSFORMERS_SDPA_FORCE_GQA" not in os.environ
    monkeypatch.setattr(scoring, "_grouped_attention_on_cpu", lambda model: scoring.contextlib.nullcontext())
    copied = notes_scorer.score(chains)
    assert copies, "the tiny PRM has grouped key/value heads: without the switch transformers copies them"
    assert all(abs(a - b) < 1e-5 for a, b in zip(grouped[0], copied[0])), (grouped, copied)


def test_each_step_prompt_is_tokenized_past_the_one_before_into_the_ids_of_a_whole_read(notes_scorer, monkeypatch):
    # protects: every step tokenized the whole conversation again, a cost that grew with the chain at every step
    import torch

    from stepcritic.train import scoring

    extended, compared = scoring._Prompt.extended, []

    def checked(self, conversation):
        ids = extended(self, conversation)
        whole = self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt")["input_ids"]
        compared.append(ids is not None and torch.equal(ids, whole))
        return ids

    monkeypatch.setattr(scoring._Prompt, "extended", checked)
    cut = notes_scorer.score([long_chain(7)])
    assert compared == [True] * 6  # every step after the first, each the ids a whole read gives
    monkeypatch.setattr(scoring._Prompt, "extended", lambda self, conversation: None)  # read every prompt whole
    assert notes_scorer.score([long_chain(7)]) == cut
