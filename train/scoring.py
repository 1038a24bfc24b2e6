"""Scoring with trained critics: the API eval's judges call on a trained artifact.

`PRMScorer` reads a generative process reward model (`method: prm`). It was trained on conversations where each
user turn adds one step and the assistant answers `+` or `-` (`data_prep.prompts.prm_messages`). To score a chain
we render the same conversation with a `+` placeholder in every assistant turn (`prompts.prm_prompt_messages`)
and run ONE teacher-forced forward pass: the logits just before each assistant turn give P(`+`) against P(`-`)
for that step. This equals asking step by step (the model is causal, so later tokens cannot influence earlier
positions) at the cost of a single pass, and chains are batched (right-padded) on top.

A PRM trained to write a note before each verdict (`data build --prm-notes`, recorded in its config as
`stepcritic_prm_notes`) cannot be read in one pass: its verdict depends on a note the model must write itself.
It is scored step by step, one chain at a time, and each step reads only what is new: the chain's keys and values stay
in the model's cache from step to step (`_Context`), so a note's generation and its reading start where the step
before ended, and a chain's cost grows linearly with its steps rather than with their square. The score is read from
the note, not from the verdict: P(step correct) is the
probability the model gives to the step's own text as its note, taken at the step's least likely token. A step
the model would write as it stands scores near 1; one whose value it would write otherwise (a colour, a count)
scores the probability of that wrong token. Why not the verdict: comparing note and step is itself an XOR of two
tokens, which a model trained from scratch learns far more slowly than the look-up the note needs
(docs/tiny-critic.md); the verdict is still trained and ends each note. The greedy note and a `+` placeholder then
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

A chain with more steps than `limits.MAX_STEPS` is refused in one line before it is scored.

Each scorer takes a VLM or a text model (`loading.load_critic` decides from the config). A text model given a chain
with an image stops with one line naming the chain and the model (`modality.ModalityMismatch`); a VLM given a
text-only chain scores it from the text, as it was trained on such rows.
"""

from __future__ import annotations

import contextlib
import os

from stepcritic.data_prep import prompts
from stepcritic.data_prep.images import rgb_images
from stepcritic.data_prep.schema import chain_images
from stepcritic.train import fast_masks
from stepcritic.train.limits import check_steps


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
        check_steps(chains)
        check_modality(self.processor, chains)
        if self.notes:
            self.last_notes = []  # every chain's notes, chain after chain
            with _grouped_attention_on_cpu(self.model):
                return [self._score_with_notes(chain) for chain in chains]
        out = []
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

    def _score_with_notes(self, chain: dict) -> list[float]:
        """Step by step: write each note greedily, then read the probability of the step's own text as the note.
        `self.last_notes` gets the notes the model wrote (what it says each step should read), for inspection.

        Each step's prompt is the whole conversation rendered again, as in training, but only its new text is
        tokenized (`_Prompt`) and the model reads only the tokens its cache does not already hold (`_Context.keep`):
        one generation and one forward pass per step."""
        from trl.data_utils import prepare_multimodal_messages

        device = next(self.model.parameters()).device
        images = rgb_images(chain)
        turns = prompts.prm_prompt_messages(chain, self.template, notes=self.notes)[0::2]  # the user turns
        context = _Context()
        messages, scores, notes = [], [], []
        prompt = _Prompt(self.processor)
        for index, turn in enumerate(turns):
            messages.append(turn)
            conversation = [prepare_multimodal_messages([dict(m) for m in messages], images=images)]
            ids = prompt.extended(conversation) if index else None
            if ids is None:
                inputs = prompt.read(conversation)
                ids = inputs["input_ids"]
            if index == 0 and images:  # the images go with the first user turn: what follows them may be reused
                context.fixed = self._vision_end(ids[0])
            # the images (and any other model input beside the text) are read only by a pass that starts at 0
            vision = {}
            if not context.keep(ids[0]):
                inputs = prompt.read(conversation)
                vision = {k: v.to(device) for k, v in inputs.items() if k not in ("input_ids", "attention_mask")}
            if self.notes == "check":
                note, p_note = self._write_note(ids.to(device), vision, context, verdict=True)
            else:
                note = self._write_note(ids.to(device), vision, context)
                p_note = self._note_probability(ids.to(device), chain["steps"][index]["text"], context)
            scores.append(p_note)
            notes.append(note)
            messages.append(prompts.assistant_turn(prompts.prm_turn(prompts.PRM_POSITIVE, note)))
        self.last_notes.append(notes)
        return scores

    def _vision_end(self, ids) -> int:
        """Where the image tokens of a prompt end (all of it when the config names no image token)."""
        config = self.model.config
        image_tokens = {getattr(config, name, None) for name in ("image_token_id", "image_token_index",
                                                                 "video_token_id")} - {None}
        positions = [k for k, token in enumerate(ids.tolist()) if token in image_tokens]
        return positions[-1] + 1 if positions else len(ids)

    def _write_note(self, ids, vision: dict, context: "_Context", verdict: bool = False):
        """The greedy note after the prompt `ids` (one row), cut where its verdict comes, the cache extended by what
        the model read; with `verdict`, also P(`+`) against P(`-`) at that place (the model's own logits, before the
        forced-verdict rule), moved towards 1/2 as far as the model doubted its note (the module's docstring)."""
        import torch

        ends = [self.positive_id, self.negative_id]
        n, budget = ids.shape[1], self.MAX_CHECK_TOKENS if verdict else self.MAX_NOTE_TOKENS
        with torch.no_grad():
            out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), **vision,
                                      past_key_values=context.cache, use_cache=True, max_new_tokens=budget,
                                      do_sample=False, eos_token_id=ends,
                                      pad_token_id=self.processor.tokenizer.pad_token_id,
                                      logits_processor=[_ForceVerdict(n + budget - 1, ends)],
                                      return_dict_in_generate=True, output_logits=verdict)
        context.read(out.past_key_values, out.sequences[0])
        row = out.sequences[0, n:].tolist()
        end = next(k for k, token in enumerate(row) if token in ends)  # always there: _ForceVerdict
        note = self.processor.tokenizer.decode(row[:end], skip_special_tokens=True).strip()
        if not verdict:
            return note
        pair = out.logits[end][0, ends].float().log_softmax(-1)
        sure = min((float(out.logits[k][0].float().softmax(-1)[token]) for k, token in enumerate(row[:end])),
                   default=1.0)
        return note, trusted_verdict(float(pair[0].exp()), sure)

    def _note_probability(self, ids, step: str, context: "_Context") -> float:
        """The least probability of any token of `step` written as the note after the prompt `ids`, the line end
        that closes the note included (teacher-forced, from the cache of the prompt)."""
        import torch

        forced = self.processor.tokenizer.encode(step + prompts.PRM_NOTE_END, add_special_tokens=False)
        n = ids.shape[1]
        context.keep(ids[0], upto=n - 1)  # the prompt's last token is read again: its logits predict the note
        fed = torch.cat([ids[:, n - 1:], torch.tensor([forced], dtype=ids.dtype, device=ids.device)], dim=1)
        with torch.no_grad():
            out = self.model(input_ids=fed, attention_mask=torch.ones((1, n + len(forced)), dtype=torch.long,
                                                                      device=ids.device),
                             past_key_values=context.cache, use_cache=True)
        context.read(out.past_key_values, torch.cat([ids[0], fed[0, 1:]]))
        probs = out.logits[0, :len(forced)].float().softmax(-1).gather(1, fed[0, 1:, None])[:, 0]
        return float(probs.min())


@contextlib.contextmanager
def _grouped_attention_on_cpu(model):
    """Let SDPA read grouped key/value heads as they are on CPU, even under a mask.

    A step after the first is read against the chain's cache with an explicit mask, where transformers copies every
    cached key and value once per query-head group (`repeat_kv`): a cost that grows with the chain at every step.
    torch's CPU kernels take the groups directly (`enable_gqa`) with the same results; transformers keeps the copy
    by default because CUDA's fast kernels do not accept a mask beside groups, so this is switched on for CPU only."""
    key = "TRANSFORMERS_SDPA_FORCE_GQA"
    before = os.environ.get(key)
    if next(model.parameters()).device.type == "cpu":
        os.environ[key] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


class _Prompt:
    """A chain's step prompts as token ids, each tokenized only where it goes past the one before.

    Each step's prompt is the conversation so far rendered again (as in training), and it starts with the previous
    step's prompt; tokenizing it whole every step costs time that grows with the chain. A tokenizer always splits at
    an added token (`<|im_start|>` and the like), so the ids up to the previous prompt's last added token stay as they
    were and only the text from there is tokenized. A prompt that does not extend the one before (a template that
    renders earlier turns otherwise) is tokenized whole."""

    def __init__(self, processor):
        self.processor = processor
        self.added = {int(i): t.content for i, t in processor.tokenizer.added_tokens_decoder.items()}
        self.text, self.ids = None, None

    def read(self, conversation):
        """The processor's inputs for the whole prompt, images included."""
        inputs = self.processor.apply_chat_template(
            conversation, add_generation_prompt=True, tokenize=True, return_dict=True, return_tensors="pt",
            processor_kwargs={"truncation": False})  # never cut: a cut prompt would end before the step it asks
        self.text, self.ids = self._render(conversation), inputs["input_ids"][0].tolist()
        return inputs

    def extended(self, conversation):
        """The prompt's ids (a 1-row tensor) from the previous prompt's, or None when it does not extend it."""
        import torch

        text = self._render(conversation)
        if self.ids is None or not text.startswith(self.text):
            return None
        last = next((j for j in range(len(self.ids) - 1, -1, -1) if self.ids[j] in self.added), None)
        if last is None:
            return None
        cut = self.text.rfind(self.added[self.ids[last]])
        rest = self.processor.tokenizer(text[cut:], add_special_tokens=False)["input_ids"]
        self.text, self.ids = text, self.ids[:last] + rest
        return torch.tensor([self.ids])

    def _render(self, conversation) -> str:
        return self.processor.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)[0]


class _Context:
    """One chain's conversation as the model has read it: `cache`, the keys and values of the token ids `ids`.

    A step's prompt normally starts with everything read before (the chat template only appends), so only its new
    tokens are read; where a template renders earlier turns otherwise, the cache is cut back to the common start.
    Nothing before `fixed` (the first prompt, which holds the images) is ever re-read on its own: a change there reads
    the whole prompt again, images included."""

    def __init__(self):
        self.cache, self.ids, self.fixed = None, None, 0

    def keep(self, ids, upto: int | None = None) -> bool:
        """Cut the cache to its longest common start with `ids` (at most `upto` tokens, by default all but the last,
        which must be fed for its logits). False when nothing is kept and the prompt must be read from the start."""
        common = self.common_start(ids, len(ids) - 1 if upto is None else upto)
        if common == 0 or common < self.fixed or not self._cut(common):
            self.cache, self.ids = None, None
            return False
        self.ids = self.ids[:common]
        return True

    def common_start(self, ids, limit: int) -> int:
        """How many of the first `limit` tokens of `ids` the cache holds."""
        if self.cache is None:
            return 0
        limit = min(len(self.ids), limit)
        differs = (self.ids[:limit] != ids[:limit]).nonzero()
        return int(differs[0]) if len(differs) else limit

    def _cut(self, length: int) -> bool:
        extra = self.cache.get_seq_length() - length
        if extra <= 0:
            return True
        try:
            self.cache.crop(-extra)
        except (RuntimeError, ValueError):  # a sliding-window layer past its window cannot be cut: read afresh
            return False
        return True

    def read(self, cache, sequence) -> None:
        """After a pass: the cache it returned holds the first `get_seq_length()` tokens of `sequence`."""
        if cache is not self.cache:
            _grow_in_place(cache)
        self.cache = cache
        self.ids = sequence[:cache.get_seq_length()]


def _grow_in_place(cache) -> None:
    """Swap a new cache's plain layers for `_GrowingLayer`s, keeping what they hold."""
    from transformers.cache_utils import DynamicLayer

    for i, layer in enumerate(getattr(cache, "layers", [])):
        if type(layer) is DynamicLayer and layer.is_initialized:
            grown = _GrowingLayer()
            grown.update(layer.keys, layer.values)
            cache.layers[i] = grown


def _growing_layer_class():
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A cache layer whose keys and values are views of a buffer that doubles when full.

        transformers' layer concatenates every new token onto all it holds, a copy of the whole cache per token that
        grows with the chain; here a token is written into room kept for it. Cutting the cache (`crop`) keeps the
        buffer, whose tail the next tokens overwrite."""

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            n, add = self.get_seq_length(), key_states.shape[-2]
            buffer = getattr(self, "buffer", None)
            if buffer is None or n + add > buffer[0].shape[-2] or self.keys.data_ptr() != buffer[0].data_ptr():
                room = max(256, 2 * (n + add))  # a layer changed elsewhere (not a view of the buffer) starts afresh
                buffer = tuple(states.new_empty((*states.shape[:-2], room, states.shape[-1]))
                               for states in (key_states, value_states))
                if n:
                    buffer[0][..., :n, :], buffer[1][..., :n, :] = self.keys, self.values
                self.buffer = buffer
            buffer[0][..., n:n + add, :], buffer[1][..., n:n + add, :] = key_states, value_states
            self.keys, self.values = buffer[0][..., :n + add, :], buffer[1][..., :n + add, :]
            return self.keys, self.values

    return GrowingLayer


def _GrowingLayer():  # noqa: N802  (the class is made on first use: transformers loads only when scoring)
    global _GROWING
    if _GROWING is None:
        _GROWING = _growing_layer_class()
    return _GROWING()


_GROWING = None


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
