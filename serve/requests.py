"""Request bodies to canonical chains (`rewards.core.make_chain`), or a refusal naming the field at fault.

Everything a client can get wrong is found here, before a chain reaches the model: the body's size (413), its JSON,
each field's type, the limits on chains, steps and images, and whether each image decodes (400, with a path such
as `chains[3].images[0]` in the message). A request either becomes chains the judge can score, or one error; the
model never sees a malformed request, so one cannot disturb the others in its batch.

A chain's id is its `chain_id` (`"chain"`, `make_chain`'s default, when the request gives none), because a judge may
read it (the `random` baseline seeds on it): the server scores exactly the chain `make_chain` builds from the same
fields, so its scores are `score_chains`' on that chain alone.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field

from stepcritic.rewards.core import AGGREGATES

SCORE_FIELDS = ("chains", "aggregate")
CHAIN_FIELDS = ("id", "question", "steps", "images")
REWARD_FIELDS = ("query", "prompts", "labels")
BODY_SECONDS = 60.0  # a body that takes longer is a stalled client, not a slow network
MAX_IMAGE_PIXELS = 40_000_000  # 8000 x 5000; a vision model sees far fewer (it resizes), so only a bomb is larger


class Refused(Exception):
    """A request the server will not score; `status` and `message` make the answer, `{"error": message}`."""

    status = 400
    headers: dict = {}

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class BadRequest(Refused):
    status = 400


class TooLarge(Refused):
    status = 413


class TooSlow(Refused):
    status = 408


class Busy(Refused):
    status = 503
    headers = {"Retry-After": "1"}


@dataclass
class Job:
    """A request's chains, ready for the judge, and what its answer needs besides their scores."""

    chains: list                      # canonical chains, in the request's order
    aggregate: str
    where: str                        # the request field listing them ("chains", "query"), for per-chain errors
    ids: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    empty: list = field(default_factory=list)  # /get_reward: the queries whose response holds no step, not scored


async def read_body(request, limit: int, seconds: float = BODY_SECONDS) -> bytes:
    """The body, refused past `limit` bytes both by its Content-Length (before reading) and by what arrives (a
    chunked body, or a Content-Length that lies, has none to trust), and refused (408) when it has not all arrived
    after `seconds`: a client that stops halfway would otherwise hold its connection, and a drain, forever."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise TooLarge(f"body: {declared} bytes, more than the server's limit of {limit}")

    async def read() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise TooLarge(f"body: more than the server's limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), seconds)
    except asyncio.TimeoutError:
        raise TooSlow(f"body: not all received within {seconds:g} s") from None


def parse_json(body: bytes, fields: tuple) -> dict:
    try:
        data = json.loads(body)
    except UnicodeDecodeError:
        raise BadRequest("body: not UTF-8 text") from None
    except json.JSONDecodeError as e:
        raise BadRequest(f"body: malformed JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    if not isinstance(data, dict):
        raise BadRequest(f"body: expected a JSON object, got {_type(data)}")
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise BadRequest(f"{_short(unknown[0])}: unknown field; expected {', '.join(fields)}")
    return data


def parse_score(body: bytes, settings, images) -> Job:
    """`POST /v1/score`'s body to a Job. `images` reads an image value to bytes (`security.ImageReader`)."""
    data = parse_json(body, SCORE_FIELDS)
    aggregate = data.get("aggregate", settings.aggregate)
    if aggregate not in AGGREGATES:
        raise BadRequest(f"aggregate: expected one of {', '.join(AGGREGATES)}, got {_short(aggregate)}")
    chains = _list(data, "chains", settings.max_chains)
    job = Job([], aggregate, "chains")
    for i, raw in enumerate(chains):
        where = f"chains[{i}]"
        if not isinstance(raw, dict):
            raise BadRequest(f"{where}: expected an object, got {_type(raw)}")
        unknown = sorted(set(raw) - set(CHAIN_FIELDS))
        if unknown:
            raise BadRequest(f"{where}.{_short(unknown[0])}: unknown field; expected {', '.join(CHAIN_FIELDS)}")
        chain_id = raw.get("id")
        if chain_id is not None and (not isinstance(chain_id, (str, int)) or isinstance(chain_id, bool)
                                     or chain_id == ""):
            raise BadRequest(f"{where}.id: expected a non-empty string or an integer, got {_type(chain_id)}")
        question = _text(raw.get("question"), f"{where}.question")
        steps = _list(raw, "steps", settings.max_steps, where, empty=False)
        for s, text in enumerate(steps):
            _text(text, f"{where}.steps[{s}]")
        values = raw.get("images")
        values = [] if values is None else _list(raw, "images", settings.max_images, where)
        pictures = [checked_image(images.read(value, f"{where}.images[{k}]"), f"{where}.images[{k}]")
                    for k, value in enumerate(values)]
        job.chains.append(canonical(question, steps, pictures, "chain" if chain_id is None else str(chain_id), where))
        job.ids.append(chain_id)
        job.steps.append(len(steps))
    return job


def parse_reward(body: bytes, settings, split_steps) -> Job:
    """`POST /get_reward`'s body (OpenRLHF's remote reward request) to a Job: each query's response is the query
    less its prompt (when the prompt is given and is a prefix of it), its question the prompt (else the query),
    its steps what `split_steps` makes of the response. A response with no step is not scored (`Job.empty`)."""
    data = parse_json(body, REWARD_FIELDS)
    queries = _list(data, "query", settings.max_chains)
    prompts = data.get("prompts")
    if prompts is not None:
        prompts = _list(data, "prompts", settings.max_chains)
        if len(prompts) != len(queries):
            raise BadRequest(f"prompts: {len(prompts)} prompts for {len(queries)} queries")
    if data.get("labels") is not None and not isinstance(data["labels"], list):
        raise BadRequest(f"labels: expected a list, got {_type(data['labels'])}")
    job = Job([], settings.aggregate, "query")
    for i, query in enumerate(queries):
        where = f"query[{i}]"
        if not isinstance(query, str):
            raise BadRequest(f"{where}: expected a string, got {_type(query)}")
        response, question = query, query
        if prompts is not None:
            question = _text(prompts[i], f"prompts[{i}]")
            if query.startswith(question):
                response = query[len(question):]
        if not question.strip():
            raise BadRequest(f"{where}: the query is empty")
        steps = [s for s in split_steps(response) if s.strip()]
        if not steps:  # an empty generation happens in RL: it gets EMPTY_REWARD, as `StepReward` gives it
            job.empty.append(i)
            job.steps.append(0)
            continue
        if len(steps) > settings.max_steps:
            raise BadRequest(f"{where}: the response splits into {len(steps)} steps, more than the server's limit "
                             f"of {settings.max_steps}")
        job.chains.append(canonical(question, steps, [], "chain", where))
        job.steps.append(len(steps))
    return job


def checked_image(data: bytes, where: str) -> bytes:
    """The image's bytes, refused when its header is unreadable or declares more than `MAX_IMAGE_PIXELS`: a few
    kilobytes of PNG can declare gigapixels, which the model's processor would expand in memory. Only the header
    is read here; `make_chain` checks that the rest decodes."""
    import io

    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as im:
            width, height = im.size
    except Image.DecompressionBombError:
        width = height = MAX_IMAGE_PIXELS  # past PIL's own bound, reported as ours below
    except Exception:  # noqa: BLE001 -- whatever PIL makes of bytes that are no image
        raise BadRequest(f"{where}: image cannot be decoded") from None
    if width * height > MAX_IMAGE_PIXELS:
        raise BadRequest(f"{where}: the image has more pixels than the server's limit of {MAX_IMAGE_PIXELS:,}")
    return data


def canonical(question: str, steps: list, pictures: list, chain_id: str, where: str) -> dict:
    """`make_chain`'s chain; its `SchemaError` (an image that does not decode) named by the request's own path."""
    from stepcritic.data_prep.schema import SchemaError
    from stepcritic.rewards.core import make_chain

    try:
        return make_chain(question, steps, pictures, chain_id=chain_id)
    except SchemaError as e:
        # make_chain names a lone image `image` and several `image[k]`; the request calls them `images[k]`
        name = e.field or ""
        name = "images[0]" if name == "image" else re.sub(r"^image\[", "images[", name)
        name = re.sub(r"^(steps\[\d+\])\.text$", r"\1", name)
        reason = re.sub(r" \(.*\)$", "", e.reason) if "cannot be decoded" in e.reason else e.reason
        raise BadRequest(f"{where}.{name}: {reason}" if name else f"{where}: {reason}") from None


def _list(data: dict, name: str, limit: int, where: str = "", empty: bool = True) -> list:
    path = f"{where}.{name}" if where else name
    if name not in data:
        raise BadRequest(f"{path}: missing")
    value = data[name]
    if not isinstance(value, list):
        raise BadRequest(f"{path}: expected a list, got {_type(value)}")
    if not value and not empty:
        raise BadRequest(f"{path}: empty")
    if len(value) > limit:
        raise BadRequest(f"{path}: {len(value)} items, more than the server's limit of {limit}")
    return value


def _text(value, path: str) -> str:
    if not isinstance(value, str):
        raise BadRequest(f"{path}: expected a string, got {_type(value)}")
    if not value.strip():
        raise BadRequest(f"{path}: empty")
    return value


def _type(value) -> str:
    return "null" if value is None else {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(value), type(value).__name__)


def _short(value) -> str:
    """A value for an error message: never the whole of something a client sent (it may be megabytes)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
