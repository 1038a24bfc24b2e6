"""`stepcritic generate`: a policy's own chains for the questions of a chains folder, as a chains folder.

Each question of the input (a group: one image, one question, its gold answer) is asked `samples` times. A sample's
text is cut into steps as `stepcritic.rewards.splitting` cuts a policy's answer (a last "Final answer: ..." line is
the answer, not a step), its answer read off it (`answers.answer_of_text`), and its outcome label is whether that
answer is the gold one (`answers.reaches_gold`: exact for the synthetic domain, normalised elsewhere). The chains of a
question share its `group_id`, so `data build` splits them together and best-of-N compares them. No step carries a
label: that is `stepcritic data label`'s work (or the data's own, for the questions' original chains).

A sample is parsed when it has at least one step and states an answer. One that states none is kept, its answer
wrong (`answer_correct` false, as `stepcritic eval` scores a reply with no answer); a blank one has no step and no
chain. Every answer is saved as it arrives (`eval.asking.ask`, keyed by the policy's fingerprint, the prompt's
template, the question, the sample's number and the seed): a killed run asks again only for what was not saved.
"""

from __future__ import annotations

import json
import os

from stepcritic.data_prep import answers, prompts, schema
from stepcritic.policy import common
from stepcritic.policy.card import write_generate_card
from stepcritic.rewards.splitting import split_steps

GENERATOR = "stepcritic.policy.generate"
QUESTION_FIELDS = ("group_id", "question", "image", "extra_images", "reference_answer", "source", "category")


def read_sample(text: str) -> tuple[list[str], str | None]:
    """A policy's reply -> (steps, answer): the steps as the reward splitter cuts them, the answer of a last "Final
    answer:" line or else the one the text states."""
    body, final = answers.without_final_line(text or "")
    steps = split_steps(body)
    return steps, final or answers.answer_of_text(body)


def questions(chains) -> list[int]:
    """The row of each question's first chain (a group is one image and one question), in order."""
    first: dict[str, int] = {}
    for i, group in enumerate(chains.data.column("group_id").to_pylist()):
        first.setdefault(group, i)
    return list(first.values())


def _gold(chain: dict, where: str) -> str:
    gold = chain.get("reference_answer")
    if not isinstance(gold, str) or not gold.strip():
        raise schema.SchemaError("no gold answer: the outcome label of a sampled chain is whether it reaches it",
                                 where, "reference_answer")
    return gold


def _question_meta(chain: dict) -> dict:
    """What the question's own chain says about the scene, not about its steps (their labels, checks and faults
    describe other steps than a policy's)."""
    return {k: v for k, v in schema.chain_meta(chain).items() if not k.startswith("step_") and k != "clues"}


def sample_key(fingerprint: str, template, chain: dict, k: int, seed: int) -> str:
    from stepcritic.eval.asking import content_key

    images = [schema.image_fingerprint(image) for image in schema.chain_images(chain)]
    return content_key("generate", fingerprint, template.hash, chain["question"], images, k, seed)


def generate(chains_path: str, policy: str, out_dir: str, samples: int, temperature: float | None = 1.0,
             max_new_tokens: int | None = 256, seed: int = 0, template: str | None = None, overwrite: bool = False,
             progress: bool = False, limit: int | None = None, world=None) -> dict | None:
    """Sample `samples` chains per question of `chains_path` from the `policy` spec into a chains folder at `out_dir`;
    returns its stats (also in `out_dir/stats.json`). Under several ranks (`world`, a `distributed.World`) each asks
    its share of the questions and rank 0 writes the folder; the others return None."""
    from stepcritic import distributed
    from stepcritic.eval.cache import JsonlLog, merge_shards
    from stepcritic.eval.judges.prompting import chain_prompt

    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 1:
        raise common.PolicyError(f"--samples must be at least 1, got {samples!r}")
    clock = common.Clock()
    inputs = {"--chains": chains_path, "--template": template}
    common.check_out(out_dir, overwrite, inputs)
    chains = schema.load_chains(chains_path)
    encoded = schema.undecoded(chains)
    rows = questions(encoded)[:limit]
    loaded = prompts.load_template(template or prompts.DEFAULT_TEMPLATES["policy"])
    shown, where = {}, common.where_of(chains_path)
    for i in rows:  # every question has a gold answer before any sample is asked for
        record = encoded[i]
        _gold(record, where(record, i))
        shown[i] = {name: record[name] for name in QUESTION_FIELDS}
    model = common.generative_model(policy, temperature, max_new_tokens, "--policy")
    try:
        fingerprint = model.fingerprint()
        keys = {(i, k): sample_key(fingerprint, loaded, shown[i], k, seed) for i in rows for k in range(samples)}

        def make(i):
            chain = chains[i]  # decoded here, as the prompt is sent
            return lambda: chain_prompt(prompts.policy_messages(chain, loaded), chain)

        jobs = [(keys[i, k], make(i)) for i in rows for k in range(samples)]
        path = os.path.join(common.cache_dir(out_dir, model.cache_name, fingerprint), "samples.jsonl")
        world = world or distributed.ONE_PROCESS
        if world.size == 1:
            merge_shards(os.path.dirname(path))  # what a killed run of several ranks saved
            asked, texts = common.ask_saved(model, jobs, JsonlLog(path, "key"), seed, "samples", progress)
        else:  # whole questions to each rank (every sample is equal work); a server's policy is asked from rank 0
            mine = distributed.share(world, {shown[i]["group_id"]: samples for i in rows}) if model.shards else (
                {shown[i]["group_id"] for i in rows} if world.main else set())
            share = [(keys[i, k], make(i)) for i in rows if shown[i]["group_id"] in mine for k in range(samples)]

            def ask_share(shard):
                common.ask_saved(model, share, JsonlLog(path, "key", shard=shard), seed, "samples",
                                 progress and world.main)

            before = common.ask_on_ranks(world, ask_share, path)
            if before is None:
                return None
            asked = {"asked": len(set(keys.values()) - before), "cached": len(set(keys.values()) & before)}
            texts = {key: record["text"] for key, record in JsonlLog(path, "key").load().items()}
    finally:
        model.close()
    settings = {**common.sampling(model), "samples": samples, "seed": seed, "template": loaded.name,
                "template_hash": loaded.hash}
    counts = {"questions": len(rows), "samples": len(jobs), "parsed": 0, "unparsed": 0, "no_answer": 0, "blank": 0,
              "answers_correct": 0, "chains": 0, "steps": 0}

    def sampled():
        for i in rows:
            question = encoded[i]
            for k in range(samples):
                text = texts[keys[i, k]]
                steps, answer = read_sample(text)
                parsed = bool(steps) and answer is not None
                counts["parsed" if parsed else "unparsed"] += 1
                if not steps:
                    counts["blank"] += 1
                    continue
                counts["no_answer"] += answer is None
                correct = answers.reaches_gold(question, answer)
                counts["answers_correct"] += correct
                counts["chains"] += 1
                counts["steps"] += len(steps)
                meta = {**_question_meta(question), "policy": model.cache_name, "policy_fingerprint": fingerprint,
                        "sampling": settings, "sample": k, "question_chain": question["chain_id"], "parsed": parsed,
                        "text": text}
                chain_id = f"policy-{question['group_id']}-s{k}"
                yield schema.validate_chain({
                    **{name: question[name] for name in QUESTION_FIELDS}, "chain_id": chain_id,
                    "generator": f"policy {model.cache_name}", "final_answer": answer, "answer_correct": correct,
                    "steps": [{"text": s} for s in steps], "meta": meta}, where=chain_id)

    stats = {}

    def write(target):
        schema.save_chains(sampled(), target)
        stats.update({"generator": GENERATOR, "input": chains_path, "policy": model.cache_name,
                      "policy_fingerprint": fingerprint, "sampling": settings, **counts,
                      "asked": asked["asked"], "cached": asked["cached"], "wall_seconds": clock.seconds()})
        with open(os.path.join(target, schema.CHAINS_STATS_FILE), "w") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
        write_generate_card(stats, os.path.join(target, "README.md"))

    if not any(texts[key].strip() for key in keys.values()):
        raise common.PolicyError(f"every one of the {len(jobs)} samples of {policy!r} is blank: no chain to write "
                                 f"(they are saved in {out_dir}/cache)")
    common.install(out_dir, inputs, write)
    return {"out_dir": out_dir, **stats}
