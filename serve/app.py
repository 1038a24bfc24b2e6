"""The HTTP routes (FastAPI) and the two layers every request passes first: observation (metrics and the server's
own access log) and the API key check.

uvicorn's access log is off: it writes the request line, query string included, where a key sent in the wrong place
would land. The log line here names the route (or `other`) and never the raw path, the query string or a header.

Request bodies are parsed on a worker thread of the event loop's executor (decoding images is CPU work) and chains
are scored on the batcher's model thread, so the event loop only moves bytes and awaits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from stepcritic.errors import UserError
from stepcritic.serve.batcher import ChainFailed, QueueFull, Stopped
from stepcritic.serve.metrics import route_label
from stepcritic.serve.requests import BadRequest, Busy, Refused, parse_reward, parse_score, read_body
from stepcritic.serve.security import authorized, key_in_url

log = logging.getLogger("stepcritic.serve")
OPEN_ROUTES = ("/health",)
CLIENT_GONE = 499  # the status counted for a client that hung up before its body arrived (nginx's convention)


def create_app(settings, judge_info, batcher, metrics, images):
    """The ASGI application: FastAPI's routes inside the observation and key layers. `images` is the
    `security.ImageReader` for `/v1/score`'s image values."""

    @asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        yield
        # uvicorn calls this once every connection is closed, so no request waits on the batcher any more; its
        # queue is empty, and stopping only ends the worker (it would first finish anything still queued)
        batcher.stop()
        await asyncio.to_thread(batcher.join)
        log.info("drained: %d requests received, %d answered", metrics.received, metrics.answered)

    app = FastAPI(title="stepcritic serve", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def http_error(_request, exc: HTTPException):
        return JSONResponse({"error": str(exc.detail).lower()}, exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def server_error(_request, _exc: Exception):
        return JSONResponse({"error": "internal error (see the server's log)"}, 500)

    async def scored(request: Request, parse, *context):
        """Body -> parsed job -> its scores; a `Refused` for anything in the way."""
        if not batcher.has_room():  # turned away before the body is even read
            raise Busy("the server is busy: its queue is full; retry later")
        body = await read_body(request, settings.max_body_bytes)
        job = await asyncio.to_thread(parse, body, settings, *context)
        try:
            results = await batcher.submit(job.chains, job.aggregate)
        except QueueFull:
            raise Busy("the server is busy: its queue is full; retry later") from None
        except Stopped:
            raise Busy("the server is shutting down; retry on another") from None
        except ChainFailed as failed:
            raise _judge_error(job, failed) from None
        return job, results

    async def answer(request: Request, route):
        try:
            return await route(request)
        except Refused as refused:
            return JSONResponse({"error": refused.message}, refused.status, headers=refused.headers)
        except ClientDisconnect:
            return Response(status_code=CLIENT_GONE)

    @app.post("/v1/score")
    async def score(request: Request):
        async def route(request):
            job, results = await scored(request, parse_score, images)
            return JSONResponse({
                "results": [{"id": chain_id, "step_scores": result.step_scores, "score": result.score}
                            for chain_id, result in zip(job.ids, results)],
                "aggregate": job.aggregate,
                "judge": {"spec": judge_info.spec, "fingerprint": judge_info.fingerprint}})
        return await answer(request, route)

    @app.post("/get_reward")
    async def get_reward(request: Request):
        async def route(request):
            from stepcritic.rewards.splitting import split_steps
            from stepcritic.rewards.step_reward import EMPTY_REWARD

            job, results = await scored(request, parse_reward, split_steps)
            judged = [i for i in range(len(job.steps)) if i not in job.empty]  # the query of each result
            missing = [i for i, result in zip(judged, results) if result.score is None]
            if missing:  # a judge without chain scores serves /v1/score's step scores, not rewards
                raise JudgeFault(f"query[{missing[0]}]: the judge gave this response no score")
            # a response with no step gets the reward `StepReward` gives it, so RL never stalls on a blank answer
            rewards = [EMPTY_REWARD] * len(job.steps)
            for i, result in zip(judged, results):
                rewards[i] = float(result.score)
            return JSONResponse({"rewards": rewards, "scores": rewards,
                                 "extra_logs": {"steps": [float(n) for n in job.steps]}})
        return await answer(request, route)

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/metrics")
    async def metrics_text():
        return PlainTextResponse(metrics.render(batcher.waiting), media_type="text/plain; version=0.0.4")

    return Observed(KeyCheck(app, settings.api_keys), metrics)


def _judge_error(job, failed: ChainFailed) -> Refused:
    """A chain the judge raised on when scored alone: the client's fault when the judge says the input is wrong (too
    long for the model, an image the model refuses), else the server's."""
    where = f"{job.where}[{failed.index}]"
    error = failed.error
    if isinstance(error, (UserError, ValueError)):
        return BadRequest(f"{where}: the judge cannot score it: {_first_line(error)}")
    # score_chains' words for a chain an API judge got no answer for: the fault lies upstream
    fault = UpstreamFault if "was not judged" in str(error) else JudgeFault
    return fault(f"{where}: the judge failed ({type(error).__name__}: {_first_line(error)})")


class JudgeFault(Refused):
    status = 500


class UpstreamFault(Refused):
    status = 502


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class KeyCheck:
    """401 for every route but `/health` unless `Authorization: Bearer KEY` carries a configured key."""

    def __init__(self, app, keys: tuple):
        self.app, self.keys = app, keys

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.keys or scope["path"] in OPEN_ROUTES:
            return await self.app(scope, receive, send)
        header = next((value for name, value in scope["headers"] if name == b"authorization"), None)
        if not authorized(header, self.keys):
            return await self.refuse("missing or wrong API key: send the header Authorization: Bearer KEY (a key "
                                     "in the URL is not accepted)", scope, receive, send)
        if key_in_url(scope.get("query_string", b""), self.keys):
            # a URL is written down by proxies and browsers: a key seen there is one to replace, not to accept
            return await self.refuse("the API key is in the URL, where logs keep it: send it only in the "
                                     "Authorization header, and replace it", scope, receive, send)
        return await self.app(scope, receive, send)

    @staticmethod
    async def refuse(message: str, scope, receive, send):
        response = JSONResponse({"error": message}, 401, headers={"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


class Observed:
    """Counts, times and logs every request; the log line names only the method, the route, the status and the
    time taken."""

    def __init__(self, app, metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500
        self.metrics.request_started()

        async def observed_send(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, observed_send)
        finally:
            seconds = time.perf_counter() - start
            self.metrics.request_done(scope["path"], status, seconds)
            log.info("%s %s %d %.1f ms", scope["method"], route_label(scope["path"]), status, 1000 * seconds)
