"""Throughput benchmarks (not tests).

    python -m stepcritic.train.bench --config RECIPE [--steps N] [--real-size]
        N training steps of the recipe's model, randomly initialised (the tiny critic for tiny recipes; else a
        tiny config of the recipe's architecture, or with --real-size its published shape from
        `train.archs.real_config`), with the recipe's LoRA/freezing, batch size and
        max_length, on synthetic token batches; reports samples/s, tokens/s and, on a GPU, model FLOPs
        utilisation = 6 * parameters * tokens / time / peak (peak: the GPU's dense bf16 rate, in PEAK_FLOPS).
        Synthetic batches are text only (no pixel_values): the vision tower's share is not measured.

    python -m stepcritic.train.bench --prm-vs-generate [--chains N] [--batch-size B] [--model PATH]
        Judging 5-step chains: the PRM scorer's one forward pass vs the same model writing a full JSON
        critique (greedy, exactly as many tokens as the longest gold critique). Reports chains/s for both.
"""

from __future__ import annotations

import argparse
import json
import time

# Dense bf16 tensor-core peaks (no sparsity) by GPU name fragment, in FLOP/s.
PEAK_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 125e12, "L4": 121e12}


def peak_flops(device_name: str) -> float | None:
    return next((flops for key, flops in PEAK_FLOPS.items() if key in device_name), None)


def _timed(fn, repeats: int = 1) -> float:
    """Seconds for `repeats` calls of fn (GPU work included)."""
    import torch

    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def _best_of(fn, rounds: int) -> float:
    """The fastest of `rounds` timings: on a shared machine the minimum is the least disturbed one."""
    return min(_timed(fn) for _ in range(rounds))


# ----------------------------------------------------------------------------- training throughput

def build_model(recipe, real_size: bool):
    import torch
    from transformers import AutoModelForImageTextToText

    from stepcritic.train import archs, common

    name = recipe.model_args.model_name_or_path
    if recipe.script_args.tiny_model:
        model, _ = common.load_model(recipe)  # the tiny critic is random-init already
    else:
        # No weights are downloaded: the real shape, or a tiny config of the same architecture.
        config = archs.real_config(name) if real_size else archs.tiny_config(archs.model_type_of(name))
        dtype = torch.bfloat16 if torch.cuda.is_available() and real_size else torch.float32
        model = AutoModelForImageTextToText.from_config(config, dtype=dtype)
    return common.prepare_model(recipe, model)


def train_throughput(recipe, steps: int, real_size: bool, seq_len: int | None) -> dict:
    import torch

    from stepcritic.train import common

    args = recipe.training_args
    device = torch.device("cuda" if torch.cuda.is_available() and not args.use_cpu else "cpu")
    model = build_model(recipe, real_size).to(device).train()
    if args.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    vocab = model.config.get_text_config().vocab_size
    batch_size = args.per_device_train_batch_size
    length = seq_len or getattr(args, "max_length", None) or 1024
    trainable, total = common.count_parameters(model)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    batch = torch.randint(0, vocab, (batch_size, length), device=device)

    def step():
        loss = model(input_ids=batch, attention_mask=torch.ones_like(batch), labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # warm-up: allocation, kernels, autotuning
    seconds = _timed(step, steps)
    tokens = steps * batch_size * length
    report = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "parameters": total, "trainable": trainable, "batch_size": batch_size, "seq_len": length,
              "steps": steps, "seconds": round(seconds, 3), "steps_per_s": round(steps / seconds, 3),
              "samples_per_s": round(steps * batch_size / seconds, 2), "tokens_per_s": round(tokens / seconds, 1)}
    peak = peak_flops(report["device"]) if device.type == "cuda" else None
    if peak:
        report.update(peak_flops_assumed=peak, mfu=round(6 * total * tokens / seconds / peak, 4))
    return report


# ----------------------------------------------------------------------------- PRM vs generation

def five_step_chains(n: int) -> list[dict]:
    """Synthetic chains, each cut or cycled to exactly 5 steps (speed only depends on the length)."""
    from stepcritic.data_prep.synth import synthesize

    chains = synthesize(n, seed=0)
    return [dict(c, steps=[dict(s) for s in (c["steps"] * 5)[:5]]) for c in chains[:n]]


def prm_vs_generate(model_path: str | None, n_chains: int, batch_size: int, rounds: int = 3) -> dict:
    import torch
    from trl.data_utils import prepare_multimodal_messages

    from stepcritic.data_prep import prompts
    from stepcritic.train.prm import PRMScorer, chain_image
    from stepcritic.train.tiny import tiny_critic_path

    path = model_path or tiny_critic_path()
    scorer = PRMScorer.from_pretrained(path, batch_size=batch_size)
    model, processor = scorer.model, scorer.processor
    chains = five_step_chains(n_chains)
    critique_tokens = max(len(processor.tokenizer.encode(prompts.critique_target(c))) for c in chains) + 1

    def generate_all():
        processor.tokenizer.padding_side = "left"  # every prompt ends where generation starts
        for start in range(0, len(chains), batch_size):
            batch = chains[start:start + batch_size]
            messages = [prepare_multimodal_messages(prompts.critique_messages(c), images=[chain_image(c["image"])])
                        for c in batch]
            inputs = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=True,
                                                   return_dict=True, return_tensors="pt",
                                                   processor_kwargs={"padding": True})
            with torch.no_grad():
                # min_new_tokens: a random model may stop early; a trained critic writes the whole critique
                model.generate(**inputs, max_new_tokens=critique_tokens, min_new_tokens=critique_tokens,
                               do_sample=False)

    scorer.score(chains[:batch_size])  # warm-up
    prm_seconds = _best_of(lambda: scorer.score(chains), rounds)
    generate_seconds = _best_of(generate_all, rounds)
    return {"model": path, "chains": len(chains), "steps_per_chain": 5, "batch_size": batch_size,
            "critique_tokens_generated": critique_tokens,
            "prm_chains_per_s": round(len(chains) / prm_seconds, 2),
            "generate_chains_per_s": round(len(chains) / generate_seconds, 2),
            "speedup": round(generate_seconds / prm_seconds, 1), "timing": f"best of {rounds} rounds",
            "threads": torch.get_num_threads()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m stepcritic.train.bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", help="recipe YAML (training throughput)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--real-size", action="store_true", help="the published architecture, random weights")
    parser.add_argument("--seq-len", type=int, help="tokens per sample (default: the recipe's max_length)")
    parser.add_argument("--prm-vs-generate", action="store_true")
    parser.add_argument("--model", help="PRM folder for --prm-vs-generate (default: the tiny critic)")
    parser.add_argument("--chains", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=8)
    args, overrides = parser.parse_known_args(argv)
    if args.prm_vs_generate:
        report = prm_vs_generate(args.model, args.chains, args.batch_size)
    elif args.config:
        from stepcritic.train.config import parse_recipe

        report = train_throughput(parse_recipe(args.config, overrides), args.steps, args.real_size, args.seq_len)
    else:
        parser.error("give --config RECIPE or --prm-vs-generate")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
