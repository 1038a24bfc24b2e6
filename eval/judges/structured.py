"""Critique decoding under the critique's JSON structure: a local critic cannot write unparseable output.

The critique format (`data_prep.critique.format_critique`) is a fixed skeleton with three kinds of holes: a
verdict per step, an explanation for each step judged wrong, and the answer verdict. Free generation asks a
model to reproduce the skeleton too, and a small or lightly trained critic often breaks it (a dropped brace,
a step skipped or repeated): the demo's critic once left 31% of its critiques unreadable. Here the skeleton
is written by the decoder and the model only fills the holes:

* a verdict is the likelier of " true" / " false" given everything so far (their full token sequences are
  scored, so it also works where a word is several tokens);
* an explanation is generated greedily up to its closing quote (or `max_explanation_tokens`).

The listwise question (ShiftCheck, "which answer is best?") is answered the same way: the likeliest of the
candidates' letters right after the prompt, one forward pass instead of free text that may name no letter.

The result is the exact string the critic was trained to write whenever the model agrees with the gold
structure, so its verdicts and explanations are read the same way as free generation's, never invented.
Segments are joined at pre-tokenizer boundaries (before a space or after punctuation), so the prefix
re-tokenises as it would in the training text.
"""

from __future__ import annotations

import json

VERDICTS = (" true", " false")
# what follows a note in the critique: a note is scored together with it, because a tokenizer may merge the note's
# last characters with the quote and comma after it (SmolLM2's `.",` is one token), so a note scored before a bare
# quote ends in a token the critic never saw there and every note looks improbable
NOTE_END = '", "correct":'


class _Context:
    """One chain's prompt in the model's KV cache, followed by the critique tokens run so far."""

    def __init__(self, prompt_len: int, cache, logits):
        self.prompt_len, self.cache = prompt_len, cache
        self.ids: list[int] = []  # the critique tokens whose keys and values follow the prompt in the cache
        self.last_logits = logits  # the logits after the last token in the cache


class StructuredDecoder:
    """Fills one chain's critique skeleton. The prompt (image included) is encoded once per chain and kept in
    the model's KV cache with the critique run so far. Each verdict or explanation re-tokenises the critique
    written so far whole (its pieces join at pre-tokenizer boundaries, so the tokens are those of the training
    text) and runs only the tokens after the longest prefix already in the cache: a verdict costs its own
    tokens, not the whole critique again, and an explanation is written one token per forward pass."""

    def __init__(self, model, processor, max_explanation_tokens: int = 48):
        self.model, self.processor = model, processor
        self.tokenizer = processor.tokenizer
        self.max_explanation_tokens = max_explanation_tokens
        self.max_note_tokens = max(max_explanation_tokens, 64)  # a check note asks up to three questions
        self.sure = 1.0  # how sure the model was of the last text it wrote (`continue_until_quote`)
        # every token that contains a double quote ends an explanation
        vocab = self.tokenizer.get_vocab()
        self.stop_ids = frozenset({i for i in vocab.values() if '"' in self.tokenizer.decode([i])}
                                  | {self.tokenizer.eos_token_id})

    def _prefill(self, prompt_text: str, images: list) -> _Context:
        import torch

        batch = self.processor(text=[prompt_text], images=images or None, return_tensors="pt")
        batch = {k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.inference_mode():
            out = self.model(**batch, use_cache=True, logits_to_keep=1)
        return _Context(batch["input_ids"].shape[1], out.past_key_values, out.logits[0, -1])

    def _ids(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def _run(self, context: _Context, ids: list[int], keep: int):
        """Keep the first `keep` critique tokens in the cache, run `ids[keep:]` after them; their logits."""
        import torch

        if keep < len(context.ids):
            context.cache.crop(keep - len(context.ids))  # a negative length: the tokens to drop
        new = torch.tensor([ids[keep:]], device=self.model.device)
        mask = torch.ones(1, context.prompt_len + len(ids), dtype=torch.long, device=self.model.device)
        with torch.inference_mode():
            logits = self.model(input_ids=new, attention_mask=mask, past_key_values=context.cache,
                                use_cache=True).logits[0]
        context.ids, context.last_logits = list(ids), logits[-1]
        return logits

    @staticmethod
    def _shared(a: list[int], b: list[int]) -> int:
        n = 0
        for x, y in zip(a, b):
            if x != y:
                break
            n += 1
        return n

    def _logprobs(self, context: _Context, written: str, continuation: str):
        """Log-probabilities of the tokens that `continuation` adds after the critique `written` so far."""
        import torch

        n_known = len(self._ids(written))
        ids = self._ids(written + continuation)
        # the logits that predict token n_known come from token n_known - 1: it is run again unless cached
        keep = min(self._shared(context.ids, ids), n_known - 1)
        logits = self._run(context, ids, keep)[n_known - 1 - keep:-1]
        targets = torch.tensor(ids[n_known:], device=logits.device)
        return logits.float().log_softmax(-1)[torch.arange(len(targets)), targets]

    def choose(self, context: _Context, written: str, options=VERDICTS) -> str:
        """The option with the highest total log-probability after the critique `written` so far."""
        scores = [float(self._logprobs(context, written, option).sum()) for option in options]
        return options[max(range(len(options)), key=scores.__getitem__)]

    def continue_until_quote(self, context: _Context, written: str, max_new_tokens: int | None = None) -> str:
        """Greedy text after the critique `written` so far, up to (not including) the first double quote.
        `self.sure` is then the least probability the model gave any of its tokens before that quote."""
        ids = self._ids(written)
        shared = self._shared(context.ids, ids)
        if shared == len(ids) == len(context.ids):
            last = context.last_logits
        else:
            last = self._run(context, ids, min(shared, len(ids) - 1))[-1]
        new, self.sure = [], 1.0
        for _ in range(max_new_tokens or self.max_explanation_tokens):
            token = int(last.argmax())
            new.append(token)
            if token in self.stop_ids:
                break
            self.sure = min(self.sure, float(last.float().softmax(-1)[token]))
            last = self._run(context, ids + new, len(ids) + len(new) - 1)[-1]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        return text.split('"', 1)[0].strip().replace("\\", "")

    def pick_letter(self, prompt_text: str, images: list, letters: str) -> int | None:
        """The index of the likeliest of `letters` as the reply's first token, or None when two letters share a
        first token (the caller then lets the model write its reply)."""
        import torch

        firsts = [self._ids(letter)[0] for letter in letters]
        if len(set(firsts)) < len(firsts):
            return None
        batch = self.processor(text=[prompt_text], images=images or None, return_tensors="pt")
        batch = {k: v.to(self.model.device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
        with torch.inference_mode():
            logits = self.model(**batch, logits_to_keep=1).logits[0, -1]
        return max(range(len(letters)), key=lambda k: float(logits[firsts[k]]))

    def text_probability(self, context: _Context, written: str, text: str, end: str = NOTE_END) -> float:
        """The least probability of any token of `text` (and the `end` that follows it in the critique) right
        after `written`."""
        return float(self._logprobs(context, written, text + end).min().exp())

    def critique_with_notes(self, prompt_text: str, images: list, steps: list[str],
                            threshold: float = 0.5, read: str = "note") -> tuple[str, list[float]]:
        """The critique JSON of a critic that writes what the image shows ("shows") before each verdict, and per
        step P(correct): with `read="note"`, the probability of the step's own text as that note
        (`text_probability`); with `read="verdict"` (check notes: questions about the image, answered), P(" true")
        against P(" false") right after the critic's own note, moved towards 1/2 as far as the critic doubted that
        note (`continue_until_quote`'s `sure`; it keeps its side of 1/2). The verdict written is that probability
        against `threshold`, so the JSON says what the scores say; the note written is the critic's own (greedy), and
        stays in the context for the later steps, as in training. Check notes come after the step copied under
        "says" (`critique.gold_critique`), which the decoder writes."""
        import math

        from stepcritic.train.scoring import trusted_verdict

        context = self._prefill(prompt_text, images)
        out, p_correct = '{"steps": [', []
        for k, step in enumerate(steps, 1):
            out += ("" if k == 1 else ", ") + f'{{"step": {k}, '
            if read == "verdict":  # a check note follows the step it checks, copied as in training
                out += '"says": ' + json.dumps(step, ensure_ascii=False) + ", "
            out += '"shows": "'
            if read == "verdict":  # trusted as far as the note is, as a PRM's (`train/scoring.py`)
                out += self.continue_until_quote(context, out, self.max_note_tokens) + NOTE_END
                true, false = (float(self._logprobs(context, out, verdict).sum()) for verdict in VERDICTS)
                p_correct.append(trusted_verdict(1.0 / (1.0 + math.exp(false - true)), self.sure))
            else:
                p_correct.append(self.text_probability(context, out, step))
                out += self.continue_until_quote(context, out) + NOTE_END
            verdict = VERDICTS[0] if p_correct[-1] >= threshold else VERDICTS[1]
            out += verdict
            if verdict == VERDICTS[1]:
                out += ', "explanation": "'
                out += self.continue_until_quote(context, out) + '"'
            out += "}"
        out += '], "answer_correct":'
        out += self.choose(context, out) + "}"
        return out, p_correct

    def critique(self, prompt_text: str, images: list, n_steps: int) -> str:
        """The critique JSON for a chain of `n_steps` steps; `prompt_text` ends with the generation prompt."""
        context = self._prefill(prompt_text, images)
        out = '{"steps": ['
        for k in range(1, n_steps + 1):
            out += ("" if k == 1 else ", ") + f'{{"step": {k}, "correct":'
            verdict = self.choose(context, out)
            out += verdict
            if verdict == " false":
                out += ', "explanation": "'
                out += self.continue_until_quote(context, out) + '"'
            out += "}"
        out += '], "answer_correct":'
        out += self.choose(context, out) + "}"
        return out
