"""The processes a launcher started (`torchrun`, `accelerate launch`, SLURM through them), for the stages that are not
training: `stepcritic eval`, `generate` and `data label` split their questions over the ranks.

`detect` reads the launcher's variables (RANK, WORLD_SIZE, LOCAL_RANK); one process is a world of size 1, and every
function here is then a no-op, so a stage is written once for both. `split` deals out whole questions (a chain's
`group_id`) by their work, the same way on every rank. `joined` starts torch.distributed (gloo: the ranks exchange
counts and wait for each other, never tensors, so it is the same on CPUs and GPUs), puts the rank on its own GPU by
LOCAL_RANK, and makes a rank that fails stop the others: it posts its error in the launcher's store, which every rank
watches, so each stops within a second with one line naming the failed rank. A rank killed outright: torchrun stops
the other workers of its node, which post that they were stopped (SIGTERM), and every rank beats in the store, so a
rank that went silent without finishing (the last of its node, or its node gone) is found within SILENT_SECONDS.

Stdlib only at the top: the command-line modules import it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass

from stepcritic.errors import UserError

# how long a rank waits at a barrier for the slowest one: a rank's share of the work may take hours more than
# another's only when the shards are far from balanced, and a dead rank is found sooner through the store
BARRIER_SECONDS = float(os.environ.get("STEPCRITIC_BARRIER_TIMEOUT", 6 * 3600))
FAILED_KEY, BEAT_KEY, DONE_KEY = "stepcritic/failed", "stepcritic/beat", "stepcritic/done"
WATCH_SECONDS = 0.5
GRACE_SECONDS = 3.0
# a rank whose beat (every WATCH_SECONDS, from a thread of its own) has not come for this long is taken for dead
SILENT_SECONDS = float(os.environ.get("STEPCRITIC_SILENT_TIMEOUT", 20))


class RankFailed(UserError):
    """A rank's error, named by its rank: the one line the command prints."""


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        """The rank that merges the shards and writes the outputs."""
        return self.rank == 0

    @property
    def shard(self) -> str | None:
        """The name of this rank's cache shard (`eval.cache.JsonlLog`), None in one process."""
        return None if self.size == 1 else f"rank{self.rank}"


ONE_PROCESS = World()


def detect(environ=os.environ) -> World:
    """The world the launcher's variables describe; one process when WORLD_SIZE is unset or 1."""
    try:
        size = int(environ.get("WORLD_SIZE", "1"))
        rank = int(environ.get("RANK", "0"))
        local = int(environ.get("LOCAL_RANK", "0"))
    except ValueError:
        raise UserError(f"RANK={environ.get('RANK')!r}, WORLD_SIZE={environ.get('WORLD_SIZE')!r} and LOCAL_RANK="
                        f"{environ.get('LOCAL_RANK')!r} must be integers (set by torchrun or accelerate launch)") \
            from None
    if size < 1 or not 0 <= rank < size:
        raise UserError(f"RANK={rank} is not a rank of WORLD_SIZE={size}")
    if size > 1 and "MASTER_ADDR" not in environ:
        raise UserError("WORLD_SIZE is set but MASTER_ADDR is not: start the command with torchrun or accelerate "
                        "launch (they set both), or unset WORLD_SIZE to run in one process")
    return World(rank, size, local)


def split(work: dict, size: int) -> list[set]:
    """`work` ({question: its work, e.g. steps to judge}) dealt out to `size` ranks: the largest question first to the
    rank with the least so far (ties: the lower rank), questions of equal work in their key's order. The same on every
    rank and for every run of the same questions."""
    shares, loads = [set() for _ in range(size)], [0] * size
    for key in sorted(work, key=lambda k: (-work[k], str(k))):
        least = min(range(size), key=lambda r: (loads[r], r))
        shares[least].add(key)
        loads[least] += work[key]
    return shares


def share(world: World, work: dict) -> set:
    """This rank's questions of `work` (`split`); all of them in one process."""
    return set(work) if world.size == 1 else split(work, world.size)[world.rank]


def _store(seconds: float = 30):
    """A client of the store the launcher (or rank 0) serves at MASTER_ADDR:MASTER_PORT."""
    from datetime import timedelta

    import torch.distributed as dist

    return dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                         timeout=timedelta(seconds=seconds))


def _watch(world: World, what: str, done: threading.Event) -> None:
    """Stop this process as soon as another rank has posted its failure, a rank has stopped beating without having
    finished (killed with no launcher of its node left to say so), or the store is gone with the job. Every rank
    beats; rank 0 listens to every rank's beat, the others to rank 0's."""
    try:
        store = _store()
        listened = range(world.size) if world.main else [0]
        beats, heard = {}, {}
        message = None
        while message is None and not done.wait(WATCH_SECONDS):
            store.add(f"{BEAT_KEY}/{world.rank}", 1)
            if store.check([FAILED_KEY]):
                message = store.get(FAILED_KEY).decode()
                break
            now = time.monotonic()
            for rank in listened:
                beat = store.add(f"{BEAT_KEY}/{rank}", 0)
                if beats.get(rank) != beat:
                    beats[rank], heard[rank] = beat, now
                elif now - heard[rank] > SILENT_SECONDS and not store.check([f"{DONE_KEY}/{rank}"]):
                    message = (f"rank {rank} of {world.size} stopped answering {SILENT_SECONDS:g} s ago (killed, or "
                               "its node went down)")
                    _post(message)
                    break
        if message is None:
            store.set(f"{DONE_KEY}/{world.rank}", "1")
            return
    except Exception as e:  # the store's server went down: the launcher is stopping the job
        if done.is_set():
            return
        message = f"the job's store is gone ({type(e).__name__}): another rank or node stopped"
    if not done.is_set():
        print(f"stepcritic {what}: error: rank {world.rank} stopped: {message}", file=sys.stderr, flush=True)
        # the failed rank exits first, so that the launcher names it as the first failure (torchrun then stops this
        # process itself); on another node, nothing stops this one but itself
        time.sleep(GRACE_SECONDS)
        os._exit(2)


def _post(message: str) -> None:
    """`message` as the job's failure, unless a rank posted one first (the cause; the others are its effects)."""
    try:
        store = _store(5)
        if store.add(FAILED_KEY + "/count", 1) == 1:
            store.set(FAILED_KEY, message)
    except Exception:  # noqa: S110  (the launcher stops the others when this process exits non-zero anyway)
        pass


def _on_sigterm(world: World):
    """The launcher stops this rank (another rank of its node died): the ranks of other nodes, which their own
    launchers do not stop, learn it from the store."""
    def stop(signum, frame):
        _post(f"rank {world.rank} of {world.size} was stopped by its launcher (SIGTERM): a rank on its node died")
        os._exit(128 + signum)

    return stop


def _place(world: World) -> None:
    """One GPU per rank: "cuda" means the LOCAL_RANK-th one from here on (a judge's `pick_device`)."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.set_device(world.local_rank % torch.cuda.device_count())


@contextmanager
def joined(world: World, what: str):
    """The block run as one rank of `world` (`what`: the command, for the error line); nothing in one process."""
    if world.size == 1:
        yield
        return
    from datetime import timedelta

    import torch.distributed as dist

    dist.init_process_group("gloo", rank=world.rank, world_size=world.size,
                            timeout=timedelta(seconds=BARRIER_SECONDS))
    _place(world)
    signal.signal(signal.SIGTERM, _on_sigterm(world))
    done = threading.Event()
    watcher = threading.Thread(target=_watch, args=(world, what, done), daemon=True, name="stepcritic-watch")
    watcher.start()
    try:
        yield
    except BaseException as e:
        message = f"rank {world.rank} of {world.size} failed: {e if isinstance(e, UserError) else repr(e)}"
        _post(message)
        done.set()
        if isinstance(e, UserError):
            raise RankFailed(message) from e
        raise
    else:
        done.set()
    finally:
        watcher.join(timeout=2 * WATCH_SECONDS)
        dist.destroy_process_group()


def barrier(world: World) -> None:
    """Every rank waits here for the others; a rank that never comes fails the wait on rank 0, naming it."""
    if world.size == 1:
        return
    from datetime import timedelta

    import torch.distributed as dist

    try:
        dist.monitored_barrier(timeout=timedelta(seconds=BARRIER_SECONDS), wait_all_ranks=True)
    except RuntimeError as e:  # a rank that vanished or never came (gloo says which): the job's state, not a bug
        raise RankFailed(f"waiting for the other ranks: {str(e).strip().splitlines()[0]}") from None


def gather(world: World, value) -> list:
    """Every rank's `value`, in rank order, on every rank."""
    if world.size == 1:
        return [value]
    import torch.distributed as dist

    out = [None] * world.size
    dist.all_gather_object(out, value)
    return out
