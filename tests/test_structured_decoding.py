"""Critiques decoded under their JSON skeleton (eval/judges/structured.py) always parse, whatever the model."""

import json

import pytest


@pytest.fixture(scope="module")
def untrained_critic():
    from stepcritic.train.tiny.cache import tiny_critic_path

    return tiny_critic_path(vision_pretrain_steps=200)  # a random language model: the worst case for structure


def test_structured_critiques_parse_for_every_chain_length(untrained_critic):
    from stepcritic.data_prep.critique import parse_critique
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.eval.judges.registry import make_judge

    chains = synthesize(3, seed=3)
    judge = make_judge(f"hf:{untrained_critic},mode=critique,structured=true,max_new_tokens=4")  # short explanations
    critiques = judge.judge_batch(chains)
    for chain, critique in zip(chains, critiques):
        assert critique.valid, critique.raw
        assert len(critique.verdicts) == len(chain["steps"]) and None not in critique.verdicts
        obj = json.loads(critique.raw)
        assert [s["step"] for s in obj["steps"]] == list(range(1, len(chain["steps"]) + 1))
        assert all(("explanation" in s) == (s["correct"] is False) for s in obj["steps"])
        assert parse_critique(critique.raw, len(chain["steps"])).valid


def test_choose_picks_the_likelier_continuation(untrained_critic):
    """The verdict is the option the model itself scores higher, computed here without the KV cache and from
    the whole text tokenised at once: the cached, piecewise path must agree."""
    import torch

    from stepcritic.eval.judges.structured import StructuredDecoder
    from stepcritic.train.loading import load_critic

    model, processor = load_critic(untrained_critic)
    decoder = StructuredDecoder(model.eval(), processor)
    prompt_text = processor.apply_chat_template([{"role": "user", "content": "Is it so?"}], add_generation_prompt=True,
                                                tokenize=False)
    for written in ('{"steps": [{"step": 1, "correct":', '{"steps": [{"step": 1, "correct": true}], "answer_correct":'):
        picked = decoder.choose(decoder._prefill(prompt_text, None), written)
        scores = {}
        for option in (" true", " false"):
            ids = processor.tokenizer(prompt_text + written + option, return_tensors="pt")["input_ids"]
            n_prefix = processor.tokenizer(prompt_text + written, return_tensors="pt")["input_ids"].shape[1]
            with torch.no_grad():
                logprobs = model(input_ids=ids).logits.log_softmax(-1)
            scores[option] = sum(float(logprobs[0, i - 1, ids[0, i]]) for i in range(n_prefix, ids.shape[1]))
        assert picked == max(scores, key=scores.get), (written, scores)


def test_cached_greedy_text_matches_generate_from_scratch():
    """The decoder keeps the critique run so far in the KV cache and reruns only what changed; after verdicts
    scored and text written at other places (cache entries it must drop), its greedy text is still what
    `generate` writes from the whole prompt and critique encoded afresh."""
    import torch

    from stepcritic.eval.judges.structured import StructuredDecoder
    from stepcritic.train.loading import load_critic

    model, processor = load_critic("stepcritic:tiny/base")  # pretrained: what it writes depends on what it is given
    decoder = StructuredDecoder(model.eval(), processor, max_explanation_tokens=12)
    prompt_text = processor.apply_chat_template([{"role": "user", "content": "Judge it."}], add_generation_prompt=True,
                                                tokenize=False)
    context = decoder._prefill(prompt_text, None)
    decoder.choose(context, '{"steps": [{"step": 1, "correct":')
    decoder.continue_until_quote(context, '{"steps": [{"step": 1, "shows": "')  # a branch the cache must drop
    texts = set()
    for written in ['{"steps": [{"step": 1, "correct": false, "explanation": "'] * 2 + ['{"says": "Is the circle']:
        text = decoder.continue_until_quote(context, written)
        ids = processor.tokenizer(prompt_text + written, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                 do_sample=False, eos_token_id=sorted(decoder.stop_ids), pad_token_id=0)
        expected = processor.tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        assert text == expected.split('"', 1)[0].strip().replace("\\", "")
        texts.add(text)
    assert len(texts) == 2, texts  # different contexts, different texts: the check can tell them apart


def test_structured_needs_critique_mode(untrained_critic):
    from stepcritic.eval.judges.registry import make_judge

    with pytest.raises(ValueError, match="structured=true"):
        make_judge(f"hf:{untrained_critic},mode=verifier,structured=true")


def test_structured_listwise_choice_is_the_likeliest_letter(untrained_critic):
    """ShiftCheck's question answered by the model's own ranking of the candidate letters (always one of them),
    computed here from a plain forward pass over the same prompt."""
    import torch

    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.prompts import listwise_messages
    from stepcritic.data_prep.synth import synthesize
    from stepcritic.eval.judges.generative import chain_prompt
    from stepcritic.eval.judges.registry import make_judge
    from stepcritic.train.loading import load_critic

    chains = synthesize(3, seed=5)
    judge = make_judge(f"hf:{untrained_critic},mode=critique,structured=true")
    picked = judge.pick_best(chains)
    model, processor = load_critic(untrained_critic)
    prompt = chain_prompt(listwise_messages(chains), chains[0])
    text = processor.apply_chat_template(prompt.messages, add_generation_prompt=True, tokenize=False)
    batch = processor(text=[text], images=[to_rgb(image) for image in prompt.images], return_tensors="pt")
    with torch.no_grad():
        last = model.eval()(**batch).logits[0, -1]
    ids = [processor.tokenizer(letter, add_special_tokens=False)["input_ids"][0] for letter in "ABC"]
    assert picked == max(range(3), key=lambda k: float(last[ids[k]]))
    assert judge.fingerprint() != make_judge(f"hf:{untrained_critic},mode=critique").fingerprint()
