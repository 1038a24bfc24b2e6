"""A critic as verl's custom reward function: `compute_score` (one response) and `compute_score_batch` (verl's `batch`
reward manager).

verl loads a reward function from a file and a function name, and adds `reward_kwargs` to every call:

    custom_reward_function:
      path: /path/to/stepcritic/rewards/verl.py
      name: compute_score            # or compute_score_batch with reward_model.reward_manager=batch
      reward_kwargs:
        judge: prm:/path/to/runs/prm
        aggregate: min

The per-response call is `compute_score(data_source, solution_str, ground_truth, extra_info=None, **reward_kwargs)`;
the `batch` manager's is `compute_score_batch(data_sources=, solution_strs=, ground_truths=, extra_infos=,
**reward_kwargs)`, which judges the whole batch in one pass. Extra keyword arguments that newer verl versions add
are accepted and ignored.

The question and images come from the row's `extra_info`, which verl's data preparation writes:
- the question is `extra_info["question"]`; failing that `extra_info["prompt"]` (a string, or chat messages read
  as TRL's are: the last user message's text); failing both, ValueError, since a critic judges steps against a
  question. verl's multimodal prompts mark each image with an `<image>` placeholder in the text, which the
  question leaves out (`trl.question_text`);
- the images are `extra_info["images"]` (a list) or `extra_info["image"]` (one); none otherwise, and the critic then
  judges the text alone. verl gives the images to the policy from the row's own `images` column, not to the reward
  function: copy them into `extra_info` when preparing the data to have the critic see them.
`ground_truth` and `data_source` are not used: the critic judges the steps, not the final answer against a key (add
a verifiable reward beside it for that).

verl needs a number for every response, so both fallbacks default to 0.0 here: a response with no steps
(`empty_reward`) and one the judge gives no score (`unscored_reward`). A judge failure raises (`core.score_chains`).
One `StepReward` is built per setting (judge, aggregate, split, batch size, fallbacks) and kept for the life of the
process, and every setting naming the same judge and batch size shares one judge: a critic is loaded once per reward
worker, not once per call. verl imports this file under a module name of its own (`custom_module`); its imports are
absolute, so that works as well as importing `stepcritic.rewards.verl`.
"""

from __future__ import annotations

import json

from stepcritic.rewards.splitting import split_steps
from stepcritic.rewards.step_reward import StepReward
from stepcritic.rewards.trl import Completion, question_text, row_images

_JUDGES: dict[tuple, object] = {}  # (spec, batch_size) -> Judge
_REWARDS: dict[tuple, StepReward] = {}


def step_reward(judge, aggregate: str = "min", split=None, batch_size: int | None = None, empty_reward: float = 0.0,
                unscored_reward: float = 0.0) -> StepReward:
    """The process's `StepReward` for these settings, built on first use; its judge is shared by every setting that
    names the same spec and batch size, so a critic is loaded once whatever the aggregates asked for."""
    if judge is None or judge == "":
        raise ValueError("judge: no critic given; set custom_reward_function.reward_kwargs.judge to a judge spec "
                         "(e.g. prm:/path/to/runs/prm)")
    if unscored_reward is None:
        raise ValueError("unscored_reward: verl needs a number for every response, got None")
    if not isinstance(judge, (str, dict)) and hasattr(judge, "items"):  # a mapping from verl's config (OmegaConf)
        judge = dict(judge.items())
    spec = json.dumps(judge, sort_keys=True, default=str) if isinstance(judge, dict) else judge
    key = (spec, batch_size, aggregate, split, empty_reward, unscored_reward)
    if key not in _REWARDS:
        if (spec, batch_size) not in _JUDGES:
            from stepcritic.eval.judges.registry import build_judge

            _JUDGES[spec, batch_size] = build_judge(judge) if isinstance(judge, (str, dict)) else judge
        _REWARDS[key] = StepReward(_JUDGES[spec, batch_size], aggregate=aggregate, split=split,
                                   batch_size=batch_size, empty_reward=empty_reward,
                                   unscored_reward=unscored_reward)
    return _REWARDS[key]


def _as_list(value):
    """A list as verl may hand it: a list, or a NumPy object array (a list column read through pandas)."""
    return list(value) if getattr(getattr(value, "dtype", None), "kind", None) == "O" else value


def _completion(solution_str, extra_info, where: str, split) -> Completion:
    if not isinstance(solution_str, str):
        raise ValueError(f"{where}: solution_str must be a string, got {type(solution_str).__name__}")
    info = extra_info if extra_info is not None else {}
    if not hasattr(info, "get"):
        raise ValueError(f"{where}: extra_info must be a mapping, got {type(info).__name__}")
    for field in ("question", "prompt"):
        if info.get(field) is not None:
            question = question_text(_as_list(info[field]), f"{where}: extra_info[{field!r}]")
            break
    else:
        raise ValueError(f"{where}: extra_info has no 'question' (nor 'prompt'); write the question into each row's "
                         "extra_info when preparing the data")
    return Completion(question, solution_str, split_steps(solution_str, split),
                      row_images(_as_list(info.get("images")), info.get("image"), None))


def compute_score(data_source, solution_str, ground_truth, extra_info=None, judge=None, aggregate: str = "min",
                  split=None, batch_size: int | None = None, empty_reward: float = 0.0, unscored_reward: float = 0.0,
                  **kwargs) -> float:
    """The critic's reward for one response (verl's custom reward function; see the module docstring)."""
    critic = step_reward(judge, aggregate, split, batch_size, empty_reward, unscored_reward)
    return critic.rewards([_completion(solution_str, extra_info, "response", split)])[0]


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos, judge=None, aggregate: str = "min",
                        split=None, batch_size: int | None = None, empty_reward: float = 0.0,
                        unscored_reward: float = 0.0, **kwargs) -> list[float]:
    """The critic's rewards for a batch of responses, judged in one pass (verl's `batch` reward manager)."""
    solution_strs = list(solution_strs)
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    if len(extra_infos) != len(solution_strs):
        raise ValueError(f"{len(solution_strs)} solution_strs but {len(extra_infos)} extra_infos")
    critic = step_reward(judge, aggregate, split, batch_size, empty_reward, unscored_reward)
    return critic.rewards([_completion(text, info, f"response {i}", split)
                           for i, (text, info) in enumerate(zip(solution_strs, extra_infos))])
