"""RPTS's own step scorer (`stepcritic eval --rpts-scorer SPEC`): a generative judge asked, step by step, whether
each conclusion follows from its premises in the chain's tree (RPTS Sec. 3: "only the logic of a single step",
scored in [0, 1], so that one bad step does not colour the judgment of the others).

It wraps any generative judge spec and is itself a judge (named `rpts-scorer:SPEC`): its critiques are cached
and reported like any other, its step scores are the rating / 10 (`critique.parse_score`), a step under 0.5 is
flagged, its chain score is the mean. The trees come from `rpts_tree.attach` (`bind_trees`, called by the runner
before judging); a chain without a valid tree is not asked about (no verdicts). A step that reads the image is
shown the image and asked about it too; premises are shown as the tree gives them: the clues a tree builder
listed, earlier steps by their text.
"""

from __future__ import annotations

import json

from stepcritic.data_prep.critique import parse_score
from stepcritic.data_prep.prompts import rpts_step_messages, template_hash
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.prompting import chain_prompt


class RPTSScorerJudge(Judge):
    kind = "rpts-scorer"

    def __init__(self, inner):
        if not callable(getattr(inner, "generate", None)):
            raise ValueError(f"--rpts-scorer {inner.name!r} is not a generative judge (hf:, openai:, vllm: or a py: "
                             "GenerativeJudge)")
        super().__init__(f"rpts-scorer:{inner.spec}")
        self.inner = inner
        self.batch_size = inner.batch_size
        self.needs_images = inner.needs_images
        self.trees: dict[str, dict] = {}
        self.tree_source = "data"

    @property
    def cache_name(self) -> str:
        return f"rpts-scorer:{self.inner.cache_name}"

    def bind_trees(self, gold: list[dict], tree_source: str) -> None:
        """The trees to score by (`gold[i]["rpts"]`) and what made them (part of the fingerprint: other trees,
        other prompts)."""
        self.trees = {g["chain_id"]: g.get("rpts") for g in gold}
        self.tree_source = tree_source

    def fingerprint_extra(self) -> dict:
        return {"inner": self.inner.fingerprint(), "template": template_hash("rpts_step"), "trees": self.tree_source}

    def premise_texts(self, chain: dict, tree: dict, k: int) -> list[str]:
        texts = [s["text"] for s in chain["steps"]]
        clues = {c["id"]: c for c in tree.get("clues") or []}
        shown = [f"From the {'image' if clues[c]['kind'] == 'visual' else 'question'}: {clues[c]['text']}"
                 for c in (tree.get("clue_refs") or [[]] * len(texts))[k] if c in clues]
        if not shown and "visual" in tree["reads"][k]:
            shown.append("What the image shows")
        return shown + [f"Step {p + 1}: {texts[p]}" for p in tree["premises"][k]]

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        asks = []
        for i, chain in enumerate(chains):
            tree = self.trees.get(chain["chain_id"])
            if tree is None or tree.get("premises") is None:
                continue
            for k in range(len(chain["steps"])):
                premises = self.premise_texts(chain, tree, k)
                messages = rpts_step_messages(chain, k, premises, "visual" in tree["reads"][k])
                asks.append((i, k, chain_prompt(messages, chain)))
        replies = self.inner.generate([prompt for *_, prompt in asks]) if asks else []
        scores = [[None] * len(c["steps"]) for c in chains]
        raws = [[None] * len(c["steps"]) for c in chains]
        asked, failed = [0] * len(chains), [[] for _ in chains]
        for (i, k, _), reply in zip(asks, replies):
            asked[i] += 1
            scores[i][k] = None if reply.error else parse_score(reply.text)
            raws[i][k] = reply.text
            if reply.error:
                failed[i].append(reply.error)
        out = []
        for i, chain in enumerate(chains):
            known = [s for s in scores[i] if s is not None]
            n_invalid = asked[i] - len(known)
            error = failed[i][0] if failed[i] else (
                f"{n_invalid} of {asked[i]} step scores unreadable" if n_invalid else None)
            out.append(Critique(chain["chain_id"], [None if s is None else s >= 0.5 for s in scores[i]],
                                p_incorrect=[None if s is None else 1.0 - s for s in scores[i]],
                                chain_score=sum(known) / len(known) if known else None,
                                raw=json.dumps(raws[i], ensure_ascii=False), valid=n_invalid == 0, error=error,
                                extra={"step_scores": scores[i], "n_outputs": asked[i], "n_invalid": n_invalid,
                                       "tree": (self.trees.get(chain["chain_id"]) or {}).get("source")},
                                failed=bool(failed[i])))
        return out

    def close(self) -> None:
        self.inner.close()
