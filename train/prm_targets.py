"""Per-step targets for `method: prm`: steps left out of the loss, and soft targets for Monte-Carlo scored steps.

A prm-sft row's `step_targets` holds P(+) for each step's judgement: 1.0 / 0.0 (the `+` / `-` of the conversation),
null for a step that has no target (a neutral step under `data build --neutral skip`), or a score strictly between
0 and 1 (`data build --step-targets soft`). The collator (`prm.HiddenJudgementCollator`) calls
`apply_step_targets`: a null target takes its judgement out of the loss, and fractional targets travel in the batch
under `TARGETS` to `PRMTrainer.compute_loss`, which trains those judgements with cross-entropy against the score
instead of against the thresholded token. Batches without a fractional target take SFTTrainer's own loss unchanged.
"""

from __future__ import annotations

import functools

COLUMN = "step_targets"  # the prm-sft column
TARGETS = "judgement_targets"  # batch key: P(+) at judgement positions, NaN elsewhere; popped before the forward


def apply_step_targets(batch: dict, judged, step_targets: list) -> None:
    """Mask the judgements whose target is null; put the targets in `batch[TARGETS]` when any is fractional.

    `judged` marks the judgement tokens (labels `+` or `-`); the k-th of a row is its k-th step (a judgement turn
    is one token, and truncation only cuts the last ones, which `zip` then leaves out).
    """
    import torch

    labels = batch["labels"]
    targets = torch.full(labels.shape, float("nan"))
    fractional = False
    for row, row_targets in enumerate(step_targets):
        if row_targets is None:  # a row built before `step_targets` existed: its `+`/`-` are the targets
            continue
        for position, target in zip(judged[row].nonzero().flatten().tolist(), row_targets):
            if target is None:
                labels[row, position] = -100
            else:
                targets[row, position] = target
                fractional = fractional or 0 < target < 1
    if fractional:
        batch[TARGETS] = targets


def labelled_log_probs(model, inputs: dict, labels):
    """Log-probabilities over the vocabulary at the labelled positions only, (tokens, vocabulary) in float32.

    The LM head only projects the positions whose next token is labelled in some row (`logits_to_keep`): a PRM
    labels a few tokens per step, so this never builds the (batch, sequence, vocabulary) logits, which for a
    152k-token vocabulary and image-length sequences are gigabytes (the hard-target path gets the same from
    TRL's fused LM head). The call goes through `model` itself, so DDP/DeepSpeed wrappers see the forward.
    """
    mask = labels[:, 1:] != -100
    kept = mask.any(0).nonzero().flatten()  # positions t whose label t + 1 is trained in at least one row
    logits = model(**inputs, use_cache=False, logits_to_keep=kept.to(inputs["input_ids"].device)).logits
    return logits[mask[:, kept].to(logits.device)].float().log_softmax(-1)


def soft_judgement_loss(log_probs, labels, targets, positive_id: int, negative_id: int, num_items=None):
    """SFT's token cross-entropy over the labelled tokens, except that a judgement with target p (not NaN) costs
    -(p log q(+) + (1 - p) log q(-)), which is the usual cost of `+` (p = 1) or `-` (p = 0) at the ends.

    `log_probs` are those of the labelled positions (`labelled_log_probs`), row by row in position order.
    Normalised like SFTTrainer's loss: by `num_items` (the labelled tokens of the whole accumulated batch) when
    given, else by this batch's labelled tokens.
    """
    import torch

    labels, targets = labels[:, 1:].to(log_probs.device), targets[:, 1:].to(log_probs.device)
    mask = labels != -100
    gold, p = labels[mask], targets[mask]
    hard = -log_probs.gather(1, gold[:, None])[:, 0]
    soft_p = torch.nan_to_num(p, nan=0.0)  # NaN in the branch `where` drops would still poison its gradient
    soft = -(soft_p * log_probs[:, positive_id] + (1 - soft_p) * log_probs[:, negative_id])
    per_token = torch.where(torch.isnan(p), hard, soft)
    denominator = mask.sum() if num_items is None else num_items
    return per_token.sum() / torch.as_tensor(denominator, device=per_token.device).clamp(min=1)


@functools.cache
def trainer_class():
    """`trl.SFTTrainer` with the soft judgement loss (built on first use: importing TRL is slow)."""
    from trl import SFTTrainer

    class PRMTrainer(SFTTrainer):
        judgement_ids: tuple[int, int] | None = None  # (`+`, `-`) token ids, set by `prm.build_trainer`

        def _set_signature_columns_if_needed(self):
            # `remove_unused_columns` (on by default) keeps only the columns SFT's collator reads; the targets
            # are read by ours
            super()._set_signature_columns_if_needed()
            if COLUMN not in self._signature_columns:
                self._signature_columns = [*self._signature_columns, COLUMN]

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            targets = inputs.pop(TARGETS, None)
            if targets is None:
                return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                            num_items_in_batch=num_items_in_batch)
            log_probs = labelled_log_probs(model, {k: v for k, v in inputs.items() if k != "labels"},
                                           inputs["labels"])
            loss = soft_judgement_loss(log_probs, inputs["labels"], targets, *self.judgement_ids,
                                       num_items=num_items_in_batch)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                # as SFTTrainer does: num_items_in_batch counts every rank's tokens and DDP averages the gradients
                loss = loss * (self.accelerator.num_processes // self.get_tp_size())
            return (loss, {"log_probs": log_probs}) if return_outputs else loss

    return PRMTrainer
