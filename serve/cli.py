"""`stepcritic serve`: a judge's step scores over HTTP (see `stepcritic.serve` for the routes and their JSON).

Only the standard library loads with this module, so `--help` is instant; FastAPI, uvicorn and the judge's model
load when the server starts.
"""

from __future__ import annotations

import argparse

from stepcritic.rewards.core import AGGREGATES
from stepcritic.train.limits import MAX_STEPS

EPILOG = """\
routes (JSON; with --api-key-file every route but /health needs `Authorization: Bearer KEY`):
  POST /v1/score     {"chains": [{"id", "question", "steps": [...], "images": [...]}], "aggregate": "min"}
  POST /get_reward   OpenRLHF's remote reward model: --remote_rm_url http://HOST:PORT/get_reward
  GET  /health       GET /metrics (Prometheus text)

Chains from concurrent requests share forward passes (up to --max-batch chains, waiting at most --max-wait-ms for
company); past --max-queue waiting chains the server answers 503 with Retry-After. Scores equal `stepcritic eval
--judge SPEC`'s on the same chains, whatever the batch. SIGTERM finishes every accepted request, then exits 0.
Images are data URLs, base64, or paths relative to --image-root (refused without it).
"""


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text}")
    return value


def not_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text}")
    return value


def port(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port from 0 (any free one) to 65535, got {text}")
    return value


def make_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="stepcritic serve",
                                               description="Serve a judge's step scores over HTTP.")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    parser.add_argument("--judge", required=True, metavar="SPEC",
                        help="the judge to serve, as for `stepcritic eval` (e.g. prm:runs/prm)")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1, loopback: local clients only)")
    parser.add_argument("--port", type=port, default=8000, help="port (default 8000; 0: any free one, logged)")
    parser.add_argument("--api-key-file", metavar="FILE",
                        help="file of API keys, one per line: every route but /health then needs one")
    parser.add_argument("--max-batch", type=positive, default=16, metavar="N",
                        help="chains per forward pass, across requests (default 16; the judge's batch_size)")
    parser.add_argument("--max-wait-ms", type=not_negative, default=10.0, metavar="M",
                        help="how long a chain waits for others to share its forward pass (default 10)")
    parser.add_argument("--max-queue", type=positive, default=1024, metavar="Q",
                        help="chains waiting at most; past it, 503 + Retry-After (default 1024; also the most "
                             "chains one request may carry)")
    parser.add_argument("--image-root", metavar="DIR",
                        help="folder image paths are read from; without it, paths are refused")
    parser.add_argument("--aggregate", choices=AGGREGATES, default="min",
                        help="chain score from step scores when a request names none, and /get_reward's "
                             "(default min)")
    parser.add_argument("--max-body-bytes", type=positive, default=32 * 1024 * 1024, metavar="B",
                        help="largest request body, 413 past it (default 32 MiB)")
    parser.add_argument("--max-steps", type=positive, default=MAX_STEPS, metavar="S",
                        help=f"most steps per chain (default and most: {MAX_STEPS}, what a critic scores)")
    parser.add_argument("--max-images", type=positive, default=8, metavar="I",
                        help="most images per chain (default 8)")
    return parser


def main(args) -> int:
    from stepcritic.errors import require_extra

    require_extra("serve", "the HTTP server")  # before the judge loads: the server could not start without it
    from stepcritic.serve.server import serve
    from stepcritic.serve.settings import from_args

    return serve(from_args(args))
