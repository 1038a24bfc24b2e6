"""Starting and stopping the server: the listening socket, the model, uvicorn, and a drain on SIGTERM.

The order serves the person starting it: the judge spec is checked first (cheap), then the port is bound (a port
in use is one line, before minutes of model loading), then the model loads, then uvicorn serves on the bound
socket. Until uvicorn listens, connections are refused rather than left hanging.

On SIGTERM (or Ctrl+C) uvicorn stops accepting connections, lets every request in flight finish (each awaits its
chains from the batcher, whose worker keeps running), then runs the application's shutdown, which stops the
worker. uvicorn would then raise the signal again to die by it; a drained server has done what SIGTERM asks, so
it returns and the command exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
import threading

import uvicorn

from stepcritic.serve.settings import LOOPBACK, ServeError

log = logging.getLogger("stepcritic.serve")


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (port 0: any free one), or `ServeError` in one line."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except socket.gaierror as e:
        raise ServeError(f"--host {host}: cannot resolve it ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # restart at once after a stop (TIME_WAIT)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.set_inheritable(True)
    return sock


def make_server(settings, judge) -> "DrainingServer":
    """The uvicorn server for `settings` and a built judge, whose model is loaded here."""
    from stepcritic.serve import judge as judges
    from stepcritic.serve.app import create_app
    from stepcritic.serve.batcher import Batcher
    from stepcritic.serve.metrics import Metrics
    from stepcritic.serve.security import ImageReader

    info = judges.load(judge)
    metrics = Metrics()
    batcher = Batcher(judges.scorer(judge), settings.max_batch, settings.max_wait_s, settings.max_queue,
                      on_batch=metrics.batch_done)
    app = create_app(settings, info, batcher, metrics, ImageReader(settings.image_root, settings.max_body_bytes))
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            lifespan="on", server_header=False, proxy_headers=False, timeout_graceful_shutdown=None)
    return DrainingServer(config)


class DrainingServer(uvicorn.Server):
    """uvicorn's server, whose SIGTERM or Ctrl+C ends in a drain and a return instead of the signal raised again."""

    @contextlib.contextmanager
    def capture_signals(self):
        if threading.current_thread() is not threading.main_thread():  # signals reach the main thread only
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def serve(settings) -> int:
    """Run until SIGTERM or Ctrl+C, then drain; 0 once every accepted request is answered."""
    from stepcritic.serve import judge as judges

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    judge = judges.build(settings.judge_spec, settings.max_batch)  # a bad spec is reported before the port is taken
    try:
        sock = bind(settings.host, settings.port)
        try:
            server = make_server(settings, judge)
            host, port = sock.getsockname()[:2]
            if not settings.api_keys and settings.host not in LOOPBACK:
                log.warning("listening on %s without --api-key-file: anyone who can reach it may use it", host)
            log.info("stepcritic serve: judge %s on http://%s:%d (batches of up to %d chains, %g ms wait, "
                     "queue %d)", settings.judge_spec, f"[{host}]" if ":" in host else host, port,
                     settings.max_batch, settings.max_wait_s * 1000, settings.max_queue)
            server.run(sockets=[sock])
        finally:
            sock.close()
    finally:
        judge.close()
    if not server.started:
        raise ServeError("the server did not start (see the log above)")
    return 0
