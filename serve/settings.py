"""What `stepcritic serve` was asked for, checked before anything heavy loads. Stdlib only.

A bad option (a key file that cannot be read or is empty, an image root that is not a folder) is a `UserError`:
one line and exit code 2 at the command line, found before the model loads rather than after.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from stepcritic.errors import UserError
from stepcritic.train.limits import MAX_STEPS

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class ServeError(UserError):
    """An option `stepcritic serve` cannot run with; the message names it."""


@dataclass(frozen=True)
class Settings:
    judge_spec: str
    host: str = "127.0.0.1"
    port: int = 8000
    api_keys: tuple = ()          # bytes; empty: no key asked for
    max_batch: int = 16           # chains per forward pass
    max_wait_s: float = 0.01      # how long the first chain of a batch waits for company
    max_queue: int = 1024         # chains waiting at most; past it, 503
    image_root: str | None = None
    aggregate: str = "min"
    max_body_bytes: int = 32 * 1024 * 1024
    max_steps: int = MAX_STEPS    # per chain; never more, the most a critic scores
    max_images: int = 8           # per chain

    @property
    def max_chains(self) -> int:
        """Chains one request may carry: more than the queue holds could never be accepted, so it is refused as
        malformed (400) rather than told to come back later (503)."""
        return self.max_queue


def read_api_keys(path: str) -> tuple:
    """The keys of a key file, one per non-empty line (several lines let a key be rotated without downtime)."""
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ServeError(f"--api-key-file {path}: cannot read it ({e.strerror or e})") from None
    keys = tuple(line.strip() for line in lines if line.strip())
    if not keys:
        raise ServeError(f"--api-key-file {path}: holds no key (one key per line)")
    if any(len(key) < 16 for key in keys):
        raise ServeError(f"--api-key-file {path}: a key is shorter than 16 characters; use a long random one")
    return keys


def from_args(args) -> Settings:
    """Settings from the parsed command line, every file and folder checked."""
    if args.max_steps > MAX_STEPS:  # the judge would refuse such a chain after the request was accepted
        raise ServeError(f"--max-steps {args.max_steps}: more than the {MAX_STEPS} steps a critic scores "
                         "(stepcritic.train.limits.MAX_STEPS)")
    keys = read_api_keys(args.api_key_file) if args.api_key_file else ()
    image_root = None
    if args.image_root is not None:
        if not os.path.isdir(args.image_root):
            raise ServeError(f"--image-root {args.image_root}: not a folder")
        image_root = os.path.realpath(args.image_root)
    return Settings(judge_spec=args.judge, host=args.host, port=args.port, api_keys=keys, max_batch=args.max_batch,
                    max_wait_s=args.max_wait_ms / 1000.0, max_queue=args.max_queue, image_root=image_root,
                    aggregate=args.aggregate, max_body_bytes=args.max_body_bytes, max_steps=args.max_steps,
                    max_images=args.max_images)
