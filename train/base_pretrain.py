"""Vision-language pre-training of the tiny critic's base on rendered scenes: captions and visual questions.

A real critic is fine-tuned from a VLM that already reads images into words. The tiny critic's language model
starts random, and learning both to read a scene and to judge a step from a few thousand critic examples is
more than a CPU-sized run manages (the README's perception probe: binding a colour to one of three shapes
takes thousands of steps). This stage is the tiny base's LLaVA-style pre-training: next-token loss on the
answers of `data_prep.scene_qa` conversations (a caption of every cell, then questions about colours,
positions, counts, relations, sizes), with the pre-trained vision tower frozen. No chain, step or correctness
label is ever shown: the critic still has to learn to judge from the critic data.

Scenes are generated as training goes (fresh every step, never repeated), in DataLoader workers, so the same
loop serves a 2-core CPU (a few hundred steps in a cached build) and a GPU (bf16, tens of thousands of steps).
"""

from __future__ import annotations

import logging
import math
import random
import time

logger = logging.getLogger("stepcritic.train")


class SceneConversations:
    """An endless stream of encoded scene conversations, one RNG per DataLoader worker."""

    def __init__(self, processor, seed: int, image_size: int, n_questions: int = 6):
        self.processor, self.seed, self.image_size, self.n_questions = processor, seed, image_size, n_questions

    def batches(self, batch_size: int, worker: int = 0):
        from trl.data_utils import prepare_multimodal_messages

        from stepcritic.data_prep.images import to_rgb
        from stepcritic.data_prep.scene_qa import conversation

        rng = random.Random(f"stepcritic-base/{self.seed}/{worker}")
        while True:
            conversations = []
            for _ in range(batch_size):
                messages, png = conversation(rng, self.n_questions, self.image_size)
                conversations.append(prepare_multimodal_messages(messages, images=[to_rgb(png)]))
            yield encode(self.processor, conversations)


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


def _stream(processor, seed: int, image_size: int, batch_size: int, workers: int):
    """Batches from `workers` processes (or the main process with 0)."""
    import torch

    source = SceneConversations(processor, seed, image_size)

    class _Iterable(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            return source.batches(batch_size, worker=info.id if info else 0)

    loader = torch.utils.data.DataLoader(_Iterable(), batch_size=None, num_workers=workers,
                                         prefetch_factor=4 if workers else None, persistent_workers=bool(workers))
    return iter(loader)


def answer_accuracy(model, batch) -> float:
    """Teacher-forced accuracy of the answer tokens (argmax = gold) on one batch."""
    import torch

    with torch.no_grad():
        logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    predicted, gold = logits[:, :-1].argmax(-1), batch["labels"][:, 1:]
    kept = gold != -100
    return float((predicted[kept] == gold[kept]).float().mean())


def pretrain_base(model, processor, steps: int, seed: int = 0, batch_size: int = 16, learning_rate: float = 1e-3,
                  image_size: int = 96, device: str | None = None, bf16: bool = False, workers: int = 0,
                  log_every: int = 100, max_seconds: float | None = None) -> dict:
    """Train `model`'s language model and projector in place (vision tower frozen); returns the last logged loss
    and the answer-token accuracy on fresh scenes. `max_seconds` stops early (the schedule is not stretched)."""
    import torch

    from stepcritic.train import archs

    device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    archs.freeze_vision_tower(model)
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=learning_rate, weight_decay=0.0, betas=(0.9, 0.98))
    warmup = max(steps // 20, 1)
    schedule = torch.optim.lr_scheduler.LambdaLR(  # linear warm-up, cosine decay to 10%
        optimizer, lambda s: min((s + 1) / warmup, 0.1 + 0.45 * (1 + math.cos(math.pi * s / steps))))
    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model.to(device).train()
    stream = _stream(processor, seed, image_size, batch_size, workers)
    start, loss_value = time.perf_counter(), float("nan")
    for step in range(steps):
        batch = {k: v.to(device) for k, v in next(stream).items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        optimizer.step()
        schedule.step()
        out_of_time = max_seconds is not None and time.perf_counter() - start > max_seconds
        if (step + 1) % log_every == 0 or step + 1 == steps or out_of_time:
            loss_value = loss.item()
            logger.info("base pre-training step %d/%d: loss %.4f (%.1f s)", step + 1, steps, loss_value,
                        time.perf_counter() - start)
        if out_of_time:
            steps = step + 1
            break
    model.eval()
    held_out = SceneConversations(processor, seed + 10_000, image_size).batches(64)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
        accuracy = answer_accuracy(model, {k: v.to(device) for k, v in next(held_out).items()})
    model.to("cpu")
    torch.random.set_rng_state(generator_state)
    logger.info("base pre-training: %d steps, loss %.4f, answer-token accuracy on fresh scenes %.3f",
                steps, loss_value, accuracy)
    return {"steps": steps, "loss": loss_value, "answer_token_accuracy": accuracy,
            "seconds": time.perf_counter() - start}
