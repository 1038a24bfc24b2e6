"""`stepcritic serve`: a critic's step scores over HTTP, batched across requests.

Routes (JSON in and out; with `--api-key-file`, every route but `/health` needs `Authorization: Bearer KEY`):
- `POST /v1/score`, StepCritic's own request:
    {"chains": [{"id": "optional", "question": "...", "steps": ["...", ...],
                 "images": ["data:image/png;base64,...", "relative/path.png", ...]}],
     "aggregate": "min" | "mean" | "last" | "prod"}           (optional, default "min")
  answered by
    {"results": [{"id": ..., "step_scores": [...], "score": float | null}],
     "aggregate": "min", "judge": {"spec": "...", "fingerprint": "..."}}
  `images` may be omitted (a text-only chain). A path is read only under `--image-root`.
- `POST /get_reward`, OpenRLHF's remote reward protocol (`--remote_rm_url http://HOST:PORT/get_reward`):
    {"query": ["prompt + response", ...], "prompts": ["prompt", ...], "labels": [...]}     (prompts, labels optional)
  answered by {"rewards": [...], "scores": [...], "extra_logs": {...}}; each response is split into steps by
  `rewards.splitting` and scored under the server's default aggregate.
- `GET /health`, `GET /metrics` (Prometheus text format).

Scores are `rewards.core.score_chains`' for the same chains, so they equal `stepcritic eval --judge SPEC`'s.
"""
