"""A judge whose scores come from a running `stepcritic serve`:
`remote:URL[,api_key_env=STEPCRITIC_API_KEY][,concurrency=8][,batch_size=8][,threshold=0.5][,aggregate=min]`
`[,timeout=120][,max_retries=5][,backoff=1]`.

URL is the server's root (`http://HOST:PORT`): chains are POSTed to `URL/v1/score` and the served judge is read from
`GET URL/health`. A URL that already ends in `/v1/score` is taken as that route, its root being what precedes it.
So one trained critic, loaded once on a GPU machine, is evaluated from anywhere, and `stepcritic eval` scores the
same chains through the server as `--judge prm:DIR` would locally.

Each request carries `batch_size` chains (question, step texts, every image as a PNG data URL), for the server to
batch with other clients' chains; `concurrency` requests are in flight at once. A chain's critique reads the
server's answer back exactly: P(incorrect) = 1 - its step score, a verdict at `threshold`, its chain score the
server's score under `aggregate`, and the step scores themselves in `extra["p_correct"]`. So
`rewards.core.scored(critique, aggregate)` gives the server's scores back bit for bit: 1 - (1 - s) is s for every
step score the server gives (each is 1 - P(incorrect) of its own judge's critique, or 0 or 1).

The requests go through `http_client.HTTPClient`, as the OpenAI-compatible judge's do: retried with backoff on 429,
5xx (the server's 503 when its queue is full, with its Retry-After) and connection errors. A request that still
gets no answer, or whose answer cannot be read, marks its chains `failed`: no score is ever made up, nothing of them
is cached, and the next run asks them again. A batch the server refuses as malformed (400, 413, 422: a chain with
too many steps or images) is asked again chain by chain, so that only the chain at fault fails.

The fingerprint (the cache key) holds what decides the scores: the served judge's own fingerprint and the options
`threshold` and `aggregate`. The served judge is read once, before the first chain is scored or the fingerprint
given: from `GET /health` when it names it (`{"status": "ok", "judge": {"spec": ..., "fingerprint": ...}}`), else
from the answer to a `/v1/score` request of no chains, which names it as every answer does. The URL is left out (two
servers of one judge give the same scores; the cache folder's name still shows it), as are the options of speed and
access (`concurrency`, `timeout`, `max_retries`, `backoff`, `api_key_env`, `batch_size`). Every answer is checked
against that judge: one that names another (the server restarted with another model) marks its chains failed, so a
cache never mixes two judges' scores.

The API key, sent as `Authorization: Bearer KEY`, is read from the environment variable `api_key_env` and kept out
of the fingerprint, the options, repr and error messages.
"""

from __future__ import annotations

import base64
import itertools
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from stepcritic.data_prep.images import png_bytes
from stepcritic.data_prep.schema import chain_images
from stepcritic.eval.errors import EvalError
from stepcritic.eval.judges.base import Critique, Judge
from stepcritic.eval.judges.http_client import Failure, HTTPClient

ROUTE = "/v1/score"
AGGREGATES = ("min", "mean", "last", "prod")  # what `/v1/score` takes as "aggregate" (serve's wire format)
SPLIT_STATUS = {400, 413, 422}  # a batch refused for its content: each chain is asked alone


@dataclass
class _Answer:
    """One request's critiques, in the order of its chains; `error` is None when the server answered."""
    critiques: list
    error: str | None = None


class _Unreadable(ValueError):
    """The server answered, but not as `/v1/score` answers: the chains are failed, not judged."""


class RemoteJudge(Judge):
    kind = "remote"
    shards = False  # asked from rank 0 alone, at its own concurrency (`Judge.shards`)
    OPTIONS = {"api_key_env": str, "concurrency": int, "timeout": float, "max_retries": int, "backoff": float,
               "batch_size": int, "threshold": float, "aggregate": str}
    # the URL says where the scores are computed, not what they are: the served judge's fingerprint says that
    RUNTIME_OPTIONS = Judge.RUNTIME_OPTIONS | {"target", "api_key_env", "concurrency", "timeout", "max_retries",
                                              "backoff"}

    def __init__(self, spec: str, target: str | None = None, api_key_env: str = "STEPCRITIC_API_KEY",
                 concurrency: int = 8, timeout: float = 120.0, max_retries: int = 5, backoff: float = 1.0,
                 batch_size: int = 8, threshold: float = 0.5, aggregate: str = "min", **options):
        if not target or not target.startswith(("http://", "https://")):
            raise ValueError("the remote judge needs the URL of a `stepcritic serve`: remote:http://HOST:PORT")
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"threshold must lie in [0, 1], got {threshold}")
        if aggregate not in AGGREGATES:
            raise ValueError(f"unknown aggregate {aggregate!r}; expected one of {list(AGGREGATES)}")
        super().__init__(spec, target=target, api_key_env=api_key_env, concurrency=concurrency, timeout=timeout,
                         max_retries=max_retries, backoff=backoff, batch_size=batch_size, threshold=threshold,
                         aggregate=aggregate, **options)
        root = target.rstrip("/")
        root = root[:-len(ROUTE)] if root.endswith(ROUTE) else root
        self.target, self.root = target, root
        self.batch_size, self.threshold, self.aggregate = batch_size, threshold, aggregate
        self._client = HTTPClient(root + ROUTE, os.environ.get(api_key_env), concurrency=concurrency,
                                  timeout=timeout, max_retries=max_retries, backoff=backoff,
                                  name=f"{self.kind} judge {target!r}",
                                  hint=f"check the URL, that `stepcritic serve` runs there, and ${api_key_env}",
                                  thread_name="remote-judge")
        self._served: dict | None = None  # {"spec", "fingerprint"} of the judge behind the URL, once read

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.spec!r})"

    @classmethod
    def option_choices(cls) -> dict[str, tuple]:
        return {"aggregate": AGGREGATES}

    # -------------------------------------------------------------- the served judge

    def served(self) -> dict:
        """The judge the server scores with, `{"spec", "fingerprint"}`, read once: from `GET /health` when it names
        it, else from the answer to a request of no chains (every `/v1/score` answer names its judge); retried as
        any request is. Raises `EvalError` when the server cannot be reached or does not say."""
        if self._served is None:
            health = self.root + "/health"
            answer = self._client.get(health)
            if isinstance(answer, Failure):
                raise EvalError(f"{self.kind} judge {self.target!r}: cannot read the served judge from {health} "
                                f"({answer}); {self._client.hint}")
            judge = _named_judge(answer)
            if judge is None:
                answer = self._client.post_json({"chains": [], "aggregate": self.aggregate})
                if isinstance(answer, Failure):
                    raise EvalError(f"{self.kind} judge {self.target!r}: {health} does not name the judge it serves "
                                    f"and a request of no chains to {self._client.url} failed ({answer}); "
                                    f"{self._client.hint}")
                judge = _named_judge(answer)
            if judge is None:
                excerpt = self._client.redact(answer.decode("utf-8", "replace"))[:200]
                raise EvalError(f"{self.kind} judge {self.target!r}: neither {health} nor {self._client.url} names the "
                                f"judge it serves (expected {{\"judge\": {{\"spec\": ..., \"fingerprint\": ...}}}}, "
                                f"got {excerpt!r}); is a `stepcritic serve` listening there?")
            self._served = judge
        return self._served

    def fingerprint_extra(self) -> dict:
        return {"served": self.served()["fingerprint"]}

    # -------------------------------------------------------------- judging

    def judge_batch(self, chains: list[dict]) -> list[Critique]:
        self.served()  # what every answer is checked against
        batches = [chains[start:start + self.batch_size] for start in range(0, len(chains), self.batch_size)]
        return [critique for answer in self._client.map(self._ask, batches) for critique in answer.critiques]

    def judge_stream(self, chains: Iterable[dict]) -> Iterator[tuple[int, Critique]]:
        """Critiques as each request is answered, the pool kept full (`HTTPClient.answered`): at most `concurrency`
        requests, `batch_size` chains each, out for chains not yet handed over (saved)."""
        self.served()
        numbered = enumerate(chains)
        batches = iter(lambda: list(itertools.islice(numbered, self.batch_size)), [])
        groups = ((batch, [[chain for _, chain in batch]]) for batch in batches)
        for batch, (answer,) in self._client.answered(groups, self._ask):
            for (index, _), critique in zip(batch, answer.critiques):
                yield index, critique

    def _ask(self, chains: list[dict]) -> _Answer:
        """One request for `chains` (run on the client's pool: the images are encoded there)."""
        return self._post(chains, [self._wire_chain(chain) for chain in chains])

    def _post(self, chains: list[dict], wire: list[dict]) -> _Answer:
        answer = self._client.post_json({"chains": wire, "aggregate": self.aggregate})
        if isinstance(answer, Failure):
            if answer.status in SPLIT_STATUS and len(chains) > 1:
                # one chain the server refuses (too many steps or images) must not cost the others their scores
                parts = [self._post([chain], [one]) for chain, one in zip(chains, wire)]
                answered = any(part.error is None for part in parts)
                return _Answer([c for part in parts for c in part.critiques], None if answered else parts[-1].error)
            return _Answer([_failed(chain, str(answer)) for chain in chains], str(answer))
        try:
            return _Answer(self._read(chains, answer))
        except _Unreadable as e:
            error = self._client.redact(f"unreadable answer from {self._client.url}: {e}")
            return _Answer([_failed(chain, error) for chain in chains])

    @staticmethod
    def _wire_chain(chain: dict) -> dict:
        out = {"id": chain["chain_id"], "question": chain["question"], "steps": [s["text"] for s in chain["steps"]]}
        images = chain_images(chain)
        if images:  # a text-only chain sends none
            out["images"] = ["data:image/png;base64," + base64.b64encode(png_bytes(image)).decode()
                             for image in images]
        return out

    def _read(self, chains: list[dict], payload: bytes) -> list[Critique]:
        try:
            data = json.loads(payload)
            results = data["results"]
        except (ValueError, KeyError, TypeError):
            raise _Unreadable(f"no 'results' in {payload[:200].decode('utf-8', 'replace')!r}") from None
        if not isinstance(results, list) or len(results) != len(chains):
            raise _Unreadable(f"{len(results) if isinstance(results, list) else 'no'} results for {len(chains)} chains")
        judge = data.get("judge")
        if isinstance(judge, dict) and judge.get("fingerprint") != self._served["fingerprint"]:
            raise _Unreadable(f"scored by judge {judge.get('fingerprint')!r} ({judge.get('spec')}), not by "
                              f"{self._served['fingerprint']!r} ({self._served['spec']}) as /health said when this "
                              "evaluation began; run it again to score with the judge served now")
        if data.get("aggregate", self.aggregate) != self.aggregate:
            raise _Unreadable(f"chain scores under aggregate {data['aggregate']!r}, not {self.aggregate!r}")
        return [self._critique(chain, result) for chain, result in zip(chains, results)]

    def _critique(self, chain: dict, result) -> Critique:
        """A chain's critique from its result; a result that does not fit the chain fails the chain alone."""
        n_steps = len(chain["steps"])
        try:
            if not isinstance(result, dict):
                raise _Unreadable(f"a result is {type(result).__name__}, not an object")
            if result.get("id") not in (None, chain["chain_id"]):
                raise _Unreadable(f"result for {result['id']!r} in the place of {chain['chain_id']!r}")
            steps, score = result.get("step_scores"), result.get("score")
            if not isinstance(steps, list) or len(steps) not in (0, n_steps):
                raise _Unreadable(f"step_scores {steps!r} for {n_steps} steps")
            if not all(s is None or _is_score(s) for s in steps) or not (score is None or _is_number(score)):
                raise _Unreadable(f"step_scores {steps!r}, score {score!r} are not scores in [0, 1] or null")
        except _Unreadable as e:
            return _failed(chain, self._client.redact(f"unreadable answer from {self._client.url}: {e}"))
        steps = [None if s is None else float(s) for s in steps]
        if not steps:  # a judge of whole chains (an outcome reward model): a chain score and no step
            return Critique(chain["chain_id"], [None] * n_steps, chain_score=None if score is None else float(score),
                            extra={"p_correct": []})
        return Critique(chain["chain_id"], verdicts=[None if s is None else s >= self.threshold for s in steps],
                        p_incorrect=[None if s is None else 1.0 - s for s in steps],
                        chain_score=None if score is None else float(score), extra={"p_correct": steps})

    def close(self) -> None:
        self._client.close()


def _named_judge(payload: bytes) -> dict | None:
    """`{"spec", "fingerprint"}` of the judge an answer names (`"judge"`), or None when it names none."""
    try:
        judge = json.loads(payload)["judge"]
        if isinstance(judge.get("fingerprint"), str) and judge["fingerprint"]:
            return {"spec": judge.get("spec"), "fingerprint": judge["fingerprint"]}
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_score(value) -> bool:
    return _is_number(value) and 0.0 <= value <= 1.0


def _failed(chain: dict, error: str) -> Critique:
    """No answer for this chain: no judgment, which the runner neither caches nor scores."""
    return Critique(chain["chain_id"], [None] * len(chain["steps"]), valid=False, error=error, failed=True)
