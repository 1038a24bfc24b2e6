"""Scoring with trained critics: the API eval's judges call on a trained artifact.

`PRMScorer` reads a generative process reward model (`method: prm`). It was trained on conversations where each
user turn adds one step and the assistant answers `+` or `-` (`data_prep.prompts.prm_messages`). To score a chain
we render the same conversation with a `+` placeholder in every assistant turn (`prompts.prm_prompt_messages`)
and run ONE teacher-forced forward pass: the logits just before each assistant turn give P(`+`) against P(`-`)
for that step. This equals asking step by step (the model is causal, so later tokens cannot influence earlier
positions) at the cost of a single pass, and chains are batched (right-padded) on top.

A PRM trained to write a note before each verdict (`data build --prm-notes`, recorded in its config as
`stepcritic_prm_notes`) cannot be read in one pass: its verdict depends on a note the model must write itself.
It is scored step by step, and the score is read from the note, not from the verdict: P(step correct) is the
probability the model gives to the step's own text as its note, taken at the step's least likely token. A step
the model would write as it stands scores near 1; one whose value it would write otherwise (a colour, a count)
scores the probability of that wrong token. Why not the verdict: comparing note and step is itself an XOR of two
tokens, which a model trained from scratch learns far more slowly than the look-up the note needs
(docs/experiments.md); the verdict is still trained and ends each note. The greedy note and a `+` placeholder then
stay in the context for later steps, as in training. A PRM whose notes check the step (`--prm-notes check`: questions
about the image with its answers, `stepcritic_prm_notes: "check"`) is read from the verdict after its own note:
P(`+`) against P(`-`) where the note ends, since the step's text is not what such a note would say. That verdict
is only as good as the note (a misread count or a copied wrong name makes it confidently wrong), so it is trusted as
far as the note is: P(step correct) = c P(`+`) + (1 - c) / 2, where c is the least probability the model gave any
token of its own greedy note. A note it was sure of keeps its verdict's probability; one it hesitated over moves
towards 1/2. The verdict's side of 1/2, and so every thresholded verdict, stays as it was; only the ranking of
steps (AUROC, best-of-n) changes.

`StepCheckScorer` reads a model that was never trained as a critic: it asks each step "is this step correct given
the image?" and reads P(yes), the prompted counterpart of a PRM.

`RewardScorer` reads an outcome reward model (`method: reward`): one scalar per whole chain.

Each scorer takes a VLM or a text model (`loading.load_critic` decides from the config). A text model given a chain
with an image stops with one line naming the chain and the model (`modality.ModalityMismatch`); a VLM given a
text-only chain scores it from the text, as it was trained on such rows.
"""

from __future__ import annotations

from stepcritic.data_prep import prompts
from stepcritic.data_prep.images import rgb_images
from stepcritic.data_prep.schema import chain_images
from stepcritic.train import fast_masks


def trusted_verdict(p_correct: float, sure: float) -> float:
    """A verdict's P(correct) trusted as far as the note before it: `sure` (the note's least likely token's
    probability) of it, the rest 1/2 (the module's docstring). Never crosses 1/2."""
    return sure * p_correct + (1.0 - sure) / 2


def single_token_id(tokenizer, text: str) -> int:
    ids = tokenizer.encode(text, add_special_tokens=False)
    if len(ids) != 1:
        raise ValueError(f"the PRM judgement {text!r} must be one token for this tokenizer, got ids {ids}")
    return ids[0]


def training_chat_template(processor) -> str | None:
    """The chat template with `{% generation %}` markers (what TRL trains with); None if already marked."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    if has_generation_markers(processor.chat_template):
        return None
    return get_training_chat_template(processor)


def check_modality(processor, chains: list[dict]) -> None:
    """Refuse chains with an image when the model reads text only (one line: the chain and the model)."""
    from stepcritic.train.modality import ModalityMismatch, TextProcessor

    if not isinstance(processor, TextProcessor):
        return
    for chain in chains:
        if chain_images(chain):
            raise ModalityMismatch(f"chain {chain.get('chain_id')!r} has an image, but the model {processor.name} "
                                   "reads text only; judge text-only chains with it, or use a vision-language model")


def judgement_mask(labels, positive_id: int, negative_id: int):
    """The judgement tokens: in each assistant turn (a run of trained labels), the last `+`/`-`. A turn is
    that one token, or a note and then it (`prompts.prm_turn`), and a note may use the same symbols; a chat
    template may also write its own tokens around it (Qwen2.5 a newline first, Qwen3 an empty think block)."""
    import torch

    verdict = (labels == positive_id) | (labels == negative_id)
    mask = torch.zeros_like(verdict)
    for row, (trained, candidates) in enumerate(zip((labels != -100).tolist(), verdict.tolist())):
        last = None
        for position, (in_turn, candidate) in enumerate(zip(trained + [False], candidates + [False])):
            if not in_turn and last is not None:  # the turn ended: its last candidate is the judgement
                mask[row, last] = True
                last = None
            elif in_turn and candidate:
                last = position
    return mask


def judgement_positions(input_ids, assistant_mask, positive_id: int, negative_id: int):
    """For each row, the positions whose logits predict a judgement token: the one training puts the loss on
    (`judgement_mask`), not the first token of the assistant turn, which is the judgement only for templates that
    write nothing before the content."""
    import torch

    labels = input_ids.masked_fill(~assistant_mask.bool(), -100)
    judged = judgement_mask(labels, positive_id, negative_id)
    return [torch.nonzero(row).flatten() - 1 for row in judged]


class PRMScorer:
    """P(step correct) for every step of every chain, one forward pass per batch of chains."""

    MAX_NOTE_TOKENS = 48  # a note is one sentence; a verdict is forced after this many tokens
    MAX_CHECK_TOKENS = 80  # a check note asks up to three questions ("Is there a circle in the image? yes. ...")

    def __init__(self, model, processor, template=None, batch_size: int = 8):
        self.model = model.eval()
        notes = getattr(model.config, "stepcritic_prm_notes", False)
        self.notes = notes if notes == "check" else bool(notes)  # True: rewrite notes; "check": check notes
        self.last_notes: list[list[str]] = []
        fast_masks.install()
        self.processor = processor
        recorded = getattr(model.config, "stepcritic_prm_template", None)  # what `method: prm` trained with
        self.template = template or (prompts.template_from_record(recorded) if recorded else None)
        self.batch_size = batch_size
        tokenizer = processor.tokenizer
        self.positive_id = single_token_id(tokenizer, prompts.PRM_POSITIVE)
        self.negative_id = single_token_id(tokenizer, prompts.PRM_NEGATIVE)
        self.chat_template = training_chat_template(processor)

    @classmethod
    def from_pretrained(cls, path: str, dtype="float32", device: str | None = None, **kwargs) -> "PRMScorer":
        from stepcritic.train.loading import load_critic

        model, processor = load_critic(path, dtype=dtype, merged=True)
        if device:
            model.to(device)
        return cls(model, processor, **kwargs)

    def encode(self, chains: list[dict]):
        """The batch of placeholder conversations, with `assistant_masks` (right-padded)."""
        from trl.data_utils import prepare_multimodal_messages

        conversations = [prepare_multimodal_messages(prompts.prm_prompt_messages(chain, self.template),
                                                     images=rgb_images(chain)) for chain in chains]
        return self.processor.apply_chat_template(
            conversations, chat_template=self.chat_template, tokenize=True, return_dict=True,
            return_tensors="pt", return_assistant_tokens_mask=True,
            processor_kwargs={"padding": True, "padding_side": "right"})

    def score(self, chains: list[dict]) -> list[list[float]]:
        """Per chain, per step: P(`+`) normalised over {`+`, `-`}."""
        check_modality(self.processor, chains)
        out = []
        if self.notes:
            self.last_notes = []  # every chain's notes, batch after batch
            for start in range(0, len(chains), self.batch_size):
                out.extend(self._score_with_notes(chains[start:start + self.batch_size]))
            return out
        for start in range(0, len(chains), self.batch_size):
            out.extend(self._score_batch(chains[start:start + self.batch_size]))
        return out

    def _score_batch(self, chains: list[dict]) -> list[list[float]]:
        import torch

        batch = self.encode(chains)
        positions = judgement_positions(batch["input_ids"], batch.pop("assistant_masks"), self.positive_id,
                                        self.negative_id)
        for chain, row in zip(chains, positions):
            if len(row) != len(chain["steps"]):
                raise ValueError(f"{chain.get('chain_id')}: found {len(row)} judgement slots for "
                                 f"{len(chain['steps'])} steps; is the input cut by the processor's max length?")
        # Only the judgement slots need logits: keeps memory at batch x slots x vocab instead of x sequence.
        kept = torch.unique(torch.cat(positions))
        device = next(self.model.parameters()).device
        batch = {k: v.to(device) for k, v in batch.items()}
        with torch.no_grad():
            logits = self.model(**batch, logits_to_keep=kept.to(device)).logits
        pair = logits[..., [self.positive_id, self.negative_id]].float().log_softmax(-1)[..., 0].exp().cpu()
        slot = {int(p): i for i, p in enumerate(kept)}
        return [[float(pair[b, slot[int(p)]]) for p in row] for b, row in enumerate(positions)]

    def _score_with_notes(self, chains: list[dict]) -> list[list[float]]:
        """Step by step, the chains in a batch side by side (left-padded): write each note greedily, then read the
        probability of the step's own text as the note. `self.last_notes` gets the notes the model wrote (what it
        says each step should read), for inspection."""
        from trl.data_utils import prepare_multimodal_messages

        device = next(self.model.parameters()).device
        images = [rgb_images(chain) for chain in chains]
        turns = [prompts.prm_prompt_messages(chain, self.template, notes=self.notes)[0::2]  # the user turns
                 for chain in chains]
        checks = self.notes == "check"
        messages = [[] for _ in chains]
        scores, notes = [[] for _ in chains], [[] for _ in chains]
        for index in range(max(len(t) for t in turns)):
            rows = [b for b, t in enumerate(turns) if index < len(t)]
            for b in rows:
                messages[b].append(turns[b][index])
            inputs = self.processor.apply_chat_template(
                [prepare_multimodal_messages([dict(m) for m in messages[b]], images=images[b]) for b in rows],
                add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
                processor_kwargs={"padding": True, "padding_side": "left"}).to(device)
            if checks:
                written, p_notes = self._write_notes(inputs, verdicts=True)
            else:
                written = self._write_notes(inputs)
                p_notes = self._note_probabilities(inputs, [chains[b]["steps"][index]["text"] for b in rows])
            for b, note, p_note in zip(rows, written, p_notes):
                scores[b].append(p_note)
                notes[b].append(note)
                messages[b].append(prompts.assistant_turn(prompts.prm_turn(prompts.PRM_POSITIVE, note)))
        self.last_notes.extend(notes)
        return scores

    def _write_notes(self, inputs, verdicts: bool = False):
        """Greedy notes for a left-padded batch, each cut where its verdict comes; with `verdicts`, also P(`+`)
        against P(`-`) at that place (the model's own logits, before the forced-verdict rule), moved towards 1/2 as
        far as the model doubted its note (the module's docstring)."""
        import torch

        ends = [self.positive_id, self.negative_id]
        n, budget = inputs["input_ids"].shape[1], self.MAX_CHECK_TOKENS if verdicts else self.MAX_NOTE_TOKENS
        with torch.no_grad():
            out = self.model.generate(**inputs, max_new_tokens=budget, do_sample=False, eos_token_id=ends,
                                      pad_token_id=self.processor.tokenizer.pad_token_id,
                                      logits_processor=[_ForceVerdict(n + budget - 1, ends)],
                                      return_dict_in_generate=True, output_logits=verdicts)
        notes, p_correct = [], []
        for b, row in enumerate(out.sequences[:, n:].tolist()):
            end = next(k for k, token in enumerate(row) if token in ends)  # always there: _ForceVerdict
            notes.append(self.processor.tokenizer.decode(row[:end], skip_special_tokens=True).strip())
            if verdicts:
                pair = out.logits[end][b, ends].float().log_softmax(-1)
                sure = min((float(out.logits[k][b].float().softmax(-1)[token]) for k, token in enumerate(row[:end])),
                           default=1.0)
                p_correct.append(trusted_verdict(float(pair[0].exp()), sure))
        return (notes, p_correct) if verdicts else notes

    def _note_probabilities(self, inputs, steps: list[str]) -> list[float]:
        """For each row, the least probability of any token of its step written as the note, the line end that
        closes the note included (teacher-forced after the prompt)."""
        import torch

        tokenizer = self.processor.tokenizer
        forced = [tokenizer.encode(step + prompts.PRM_NOTE_END, add_special_tokens=False) for step in steps]
        width = max(map(len, forced))
        rows, n = len(steps), inputs["input_ids"].shape[1]
        # the prompts are left-padded to n; each note goes right after its prompt, the rest is right padding
        ids = torch.full((rows, n + width), tokenizer.pad_token_id, dtype=inputs["input_ids"].dtype)
        mask = torch.zeros((rows, n + width), dtype=inputs["attention_mask"].dtype)
        ids[:, :n], mask[:, :n] = inputs["input_ids"].cpu(), inputs["attention_mask"].cpu()
        for b, note in enumerate(forced):
            ids[b, n:n + len(note)] = torch.tensor(note)
            mask[b, n:n + len(note)] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)  # left padding must not shift the real tokens' positions
        device = inputs["input_ids"].device
        batch = dict(inputs, input_ids=ids.to(device), attention_mask=mask.to(device),
                     position_ids=positions.to(device))
        with torch.no_grad():
            logits = self.model(**batch).logits[:, n - 1:-1].float()
        out = []
        for b, note in enumerate(forced):
            probs = logits[b, :len(note)].softmax(-1).gather(1, torch.tensor(note, device=device)[:, None])[:, 0]
            out.append(float(probs.min()))
        return out


class _ForceVerdict:
    """A logits processor: at the last allowed position only `+` or `-` may come (a note that never ends)."""

    def __init__(self, length: int, verdicts: list[int]):
        self.length, self.verdicts = length, verdicts

    def __call__(self, input_ids, scores):
        if input_ids.shape[1] >= self.length:
            kept = scores[:, self.verdicts].clone()
            scores[:] = float("-inf")
            scores[:, self.verdicts] = kept
        return scores


class StepCheckScorer:
    """P(step correct) from a general VLM prompted, step by step, "Is step k correct given the image? Answer yes
    or no." (`prompts.step_check_messages`): the probability of " yes" against " no" as the answer's first token.
    This is how a user asks a VLM that was never trained as a critic, so it is the prompted baseline of a PRM."""

    ANSWERS = ("yes", "no")

    def __init__(self, model, processor, template=None, batch_size: int = 8):
        self.model, self.processor, self.batch_size = model.eval(), processor, batch_size
        tokenizer = processor.tokenizer
        # the first token of each answer word: enough to tell them apart, whichever way the tokenizer splits words
        self.answer_ids = [tokenizer.encode(word, add_special_tokens=False)[0] for word in self.ANSWERS]
        if self.answer_ids[0] == self.answer_ids[1]:
            raise ValueError("this tokenizer gives 'yes' and 'no' the same first token")

    @classmethod
    def from_pretrained(cls, path: str, dtype="float32", device: str | None = None, **kwargs) -> "StepCheckScorer":
        from stepcritic.train.loading import load_critic

        model, processor = load_critic(path, dtype=dtype, merged=True)
        if device:
            model.to(device)
        return cls(model, processor, **kwargs)

    def score(self, chains: list[dict]) -> list[list[float]]:
        import torch
        from trl.data_utils import prepare_multimodal_messages

        check_modality(self.processor, chains)
        asked = [(c, i) for c, chain in enumerate(chains) for i in range(len(chain["steps"]))]
        p_yes = []
        device = next(self.model.parameters()).device
        for start in range(0, len(asked), self.batch_size):
            part = asked[start:start + self.batch_size]
            conversations = [prepare_multimodal_messages(prompts.step_check_messages(chains[c], i),
                                                         images=rgb_images(chains[c])) for c, i in part]
            inputs = self.processor.apply_chat_template(
                conversations, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
                processor_kwargs={"padding": True, "padding_side": "left"}).to(device)
            with torch.no_grad():
                logits = self.model(**inputs, logits_to_keep=1).logits[:, -1].float()
            p_yes.extend(logits[:, self.answer_ids].log_softmax(-1)[:, 0].exp().tolist())
        out, k = [], 0
        for chain in chains:
            out.append(p_yes[k:k + len(chain["steps"])])
            k += len(chain["steps"])
        return out


class RewardScorer:
    """Outcome reward of whole chains (higher = better), batched."""

    def __init__(self, model, processor, template=None, batch_size: int = 8):
        self.model = model.eval()
        self.processor = processor
        self.template = template
        self.batch_size = batch_size

    @classmethod
    def from_pretrained(cls, path: str, dtype="float32", device: str | None = None, **kwargs) -> "RewardScorer":
        from stepcritic.train.reward import VLMRewardModel

        model, processor = VLMRewardModel.from_pretrained(path, dtype=dtype)
        if device:
            model.to(device)
        return cls(model, processor, **kwargs)

    def conversation(self, chain: dict) -> list:
        from trl.data_utils import prepare_multimodal_messages

        prompt, completion = prompts.outcome_messages(chain, self.template)
        return prepare_multimodal_messages(prompt + completion, images=rgb_images(chain))

    def score(self, chains: list[dict]) -> list[float]:
        import torch

        from stepcritic.train.reward import encode

        check_modality(self.processor, chains)
        device = next(self.model.parameters()).device
        out = []
        for start in range(0, len(chains), self.batch_size):
            batch = encode(self.processor, [self.conversation(c) for c in chains[start:start + self.batch_size]])
            with torch.no_grad():
                out.extend(self.model(**{k: v.to(device) for k, v in batch.items()}).tolist())
        return out
