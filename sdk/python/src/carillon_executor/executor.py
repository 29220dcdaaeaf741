"""``Executor``: the handlers, the settings, and the executor's life: register, serve
dispatches, heartbeat, and drain on shutdown, as an ASGI application or on its own server."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import ssl
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Union

import httpx

from ._calls import AdminNodes, CallError
from ._core import Core, Identity
from ._endpoint import Endpoint, Receive, Scope, Send
from ._logs import install_capture
from ._wsgi import LoopThread, WsgiEndpoint
from .jobs import JobDefinitionError, JobSpec, declared_jobs, spec

log = logging.getLogger("carillon_executor")


class ExecutorConfigError(ValueError):
    """A setting the executor cannot start with; the message names it."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field


class Executor:
    """An executor of one app. Its handlers are every ``@job`` of the program (unless
    ``declared=False``) and those given with ``handlers`` or :meth:`add_handler`.

    Run it with :meth:`serve` (or ``python -m carillon_executor``), or mount :attr:`asgi` in an
    ASGI server: it registers at its lifespan's start and drains at its end. Mounted inside
    another application whose lifespan does not reach it, call :meth:`start` and :meth:`stop`
    from that application's own lifespan.
    """

    def __init__(
        self,
        *,
        app: str,
        admin_urls: Union[str, Sequence[str]],
        executor_token: str,
        dispatch_secret: str,
        handlers: Iterable[Callable[..., Any]] = (),
        declared: bool = True,
        executor_id: Optional[str] = None,
        weight: int = 1,
        capacity: int = 16,
        advertise: Optional[str] = None,
        drain_timeout: float = 30.0,
        admin_ca: Optional[str] = None,
        capture_logs: bool = True,
        answer_within_ms: int = 20,
        threads: Optional[int] = None,
    ) -> None:
        urls = [u for u in (admin_urls.split(",") if isinstance(admin_urls, str) else admin_urls)]
        urls = [u.strip() for u in urls if u.strip()]
        if not app:
            raise ExecutorConfigError("app", "is required")
        if not urls:
            raise ExecutorConfigError("admin_urls", "name at least one admin node")
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ExecutorConfigError("admin_urls", f"{url!r} is not an http:// or https:// URL")
        if len(executor_token.strip()) < 16:
            raise ExecutorConfigError("executor_token", "is required (at least 16 characters)")
        if len(dispatch_secret.strip()) < 16:
            raise ExecutorConfigError("dispatch_secret", "is required (at least 16 characters)")
        if weight < 1 or capacity < 1:
            raise ExecutorConfigError("weight", "weight and capacity must be at least 1")
        if answer_within_ms < 0:
            raise ExecutorConfigError("answer_within_ms", "must be 0 or more")
        self._handlers: Dict[str, JobSpec] = {}
        for declared_spec in declared_jobs() if declared else []:
            self._add(declared_spec)
        for func in handlers:
            self._add(spec(func))
        self._advertise = advertise.rstrip("/") if advertise else None
        self.drain_timeout = drain_timeout
        context: Union[bool, ssl.SSLContext] = True
        if admin_ca:
            context = ssl.create_default_context()
            try:
                context.load_verify_locations(cafile=admin_ca)
            except (OSError, ssl.SSLError) as e:
                raise ExecutorConfigError("admin_ca", f"cannot read {admin_ca}: {e}") from None
        self._client = httpx.AsyncClient(
            verify=context, timeout=httpx.Timeout(10.0, connect=2.0), trust_env=False
        )
        identity = Identity(
            executor_id=executor_id or f"{app}-{secrets.token_hex(4)}",
            app=app,
            weight=weight,
            capacity=capacity,
            secret=dispatch_secret.encode(),
            capture_logs=capture_logs,
        )
        if capture_logs:
            install_capture()
        self._threads = ThreadPoolExecutor(
            max_workers=threads or capacity, thread_name_prefix="carillon-job"
        )
        self._core = Core(
            identity, self._handlers, AdminNodes(urls, executor_token, self._client), self._threads
        )
        self._endpoint = Endpoint(self._core, answer_within_ms / 1000, self._lifespan)
        self._background: List["asyncio.Task[None]"] = []
        self._loop_thread: Optional[LoopThread] = None
        self.startup_error: Optional[BaseException] = None

    def _add(self, job: JobSpec) -> None:
        if job.name in self._handlers and self._handlers[job.name].func is not job.func:
            raise JobDefinitionError(f"two handlers are named {job.name!r}")
        self._handlers[job.name] = job

    def add_handler(
        self, name: str, func: Callable[..., Any], description: str = ""
    ) -> "Executor":
        """A handler made at run time, beside the ``@job`` ones (one per script of a
        directory, one per entry of a configuration), under ``#[job]``'s name rule. Before
        :meth:`start` only."""
        if self._background:
            raise JobDefinitionError("handlers are added before the executor starts")
        self._add(spec(func, name=name, description=description))
        self._core.handlers = dict(self._handlers)
        return self

    @property
    def executor_id(self) -> str:
        return self._core.id.executor_id

    @property
    def handlers(self) -> List[str]:
        return sorted(self._handlers)

    @property
    def asgi(self) -> Callable[[Scope, Receive, Send], Any]:
        """The dispatch endpoint as an ASGI application (its paths are
        ``/carillon/v1/…``, matched at the end of the request's path)."""
        return self._endpoint

    async def start(self, advertise: Optional[str] = None) -> None:
        """Registers (retrying for 30 s while no admin node answers) and starts heartbeats and
        log shipping. ``advertise`` is the URL admin nodes reach the endpoint at."""
        if advertise:
            self._advertise = advertise.rstrip("/")
        if not self._advertise:
            raise ExecutorConfigError(
                "advertise", "the URL admin nodes reach this executor at is needed to register"
            )
        if not self._handlers:
            log.warning("no handlers: mark functions with @job, or add_handler()")
        address = self._advertise
        accepted = await self._register(address)
        interval = max(int(accepted.get("heartbeat_interval_ms", 1000)), 100) / 1000
        log.info(
            "registered executor %s of app %s at %s (%d handlers)",
            self.executor_id,
            self._core.id.app,
            address,
            len(self._handlers),
        )
        self._background = [
            asyncio.ensure_future(self._core.heartbeat(address, interval)),
            asyncio.ensure_future(self._core.ship_logs()),
        ]

    async def _register(self, address: str) -> Dict[str, Any]:
        delay, waited = 0.2, 0.0
        while True:
            try:
                return await self._core.register(address)
            except CallError as e:
                if e.permanent or waited >= 30.0:
                    raise RegistrationError(f"no admin node accepted the registration: {e}") from None
                log.warning("registration not accepted yet: %s", e)
            await asyncio.sleep(delay)
            waited += delay
            delay = min(delay * 2, 5.0)

    async def stop(self) -> None:
        """Drains (no new work; waits up to ``drain_timeout`` for the attempts running, then
        cancels them), stops heartbeats and deregisters."""
        await self._core.drain(self.drain_timeout)
        for task in self._background:
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        self._background = []
        await self._core.deregister()
        await self._client.aclose()
        self._threads.shutdown(wait=False)
        log.info("executor %s stopped", self.executor_id)

    async def _lifespan(self, scope: Scope, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self.start()
                except Exception as e:
                    self.startup_error = e
                    await send({"type": "lifespan.startup.failed", "message": str(e)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    @property
    def wsgi(self) -> WsgiEndpoint:
        """The dispatch endpoint as a WSGI application, for a WSGI service (Flask, Django):
        mount it (at the root, or under a prefix such as ``/carillon``) and call
        :meth:`start_background` when the service starts."""
        return WsgiEndpoint(self._endpoint, lambda: self._loop_thread)

    def start_background(self, advertise: str) -> None:
        """Starts the executor on an event loop of its own, in a daemon thread, for a
        service that has none (WSGI); returns once it has registered. :meth:`stop_background`
        drains it and leaves."""
        if self._loop_thread is not None:
            raise ExecutorConfigError("start_background", "the executor is started already")
        self._loop_thread = LoopThread()
        try:
            self._loop_thread.call(self.start(advertise))
        except BaseException:
            self._loop_thread.close()
            self._loop_thread = None
            raise

    def stop_background(self) -> None:
        """Drains the executor started by :meth:`start_background` and leaves."""
        if self._loop_thread is None:
            return
        self._loop_thread.call(self.stop())
        self._loop_thread.close()
        self._loop_thread = None

    def serve(
        self,
        listen: str = "127.0.0.1:9100",
        *,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        client_ca: Optional[str] = None,
    ) -> None:
        """Serves until SIGTERM or SIGINT, then drains and deregisters (uvicorn). With
        ``tls_cert`` and ``tls_key``, over HTTPS; with ``client_ca``, nodes must present a
        client certificate it signed."""
        if threading.current_thread() is threading.main_thread():
            # uvicorn hands a SIGTERM it caught back to the handler it found once it has shut
            # down; the default one would end a process that drained cleanly with the signal
            # rather than with status 0.
            signal.signal(signal.SIGTERM, lambda signum, frame: None)
        asyncio.run(self.serve_async(listen, tls_cert=tls_cert, tls_key=tls_key, client_ca=client_ca))

    async def serve_async(
        self,
        listen: str = "127.0.0.1:9100",
        *,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        client_ca: Optional[str] = None,
    ) -> None:
        try:
            import uvicorn
        except ImportError:  # pragma: no cover - uvicorn is a dependency of the package
            raise ExecutorConfigError("listen", "serving needs uvicorn: pip install uvicorn") from None
        if (tls_cert is None) != (tls_key is None):
            raise ExecutorConfigError("tls_cert", "give both tls_cert and tls_key")
        if client_ca and not tls_cert:
            raise ExecutorConfigError("client_ca", "requiring client certificates needs tls_cert and tls_key")
        sock = _bind(listen)
        host, port = sock.getsockname()[:2]
        if not self._advertise:
            scheme = "https" if tls_cert else "http"
            shown = socket.getfqdn() if host in ("0.0.0.0", "::") else host
            shown = f"[{shown}]" if ":" in shown else shown
            self._advertise = f"{scheme}://{shown}:{port}"
        config = uvicorn.Config(
            self.asgi,
            lifespan="on",
            log_level="warning",
            access_log=False,
            ssl_certfile=tls_cert,
            ssl_keyfile=tls_key,
            ssl_ca_certs=client_ca,
            ssl_cert_reqs=ssl.CERT_REQUIRED if client_ca else ssl.CERT_NONE,
        )
        self.startup_error = None
        await uvicorn.Server(config).serve(sockets=[sock])
        if self.startup_error is not None:
            raise self.startup_error

    @classmethod
    def from_env(cls, **settings: Any) -> "Executor":
        """An executor configured by the environment, as ``python -m carillon_executor``
        reads it; ``settings`` override it."""
        env = os.environ
        defaults: Dict[str, Any] = {
            "app": env.get("CARILLON_EXECUTOR_APP", ""),
            "admin_urls": env.get("CARILLON_ADMIN_URLS", ""),
            "executor_token": env.get("CARILLON_EXECUTOR_TOKEN", ""),
            "dispatch_secret": env.get("CARILLON_DISPATCH_SECRET", ""),
        }
        if "CARILLON_EXECUTOR_CAPACITY" in env:
            defaults["capacity"] = _integer("CARILLON_EXECUTOR_CAPACITY", env["CARILLON_EXECUTOR_CAPACITY"])
        for name, key in (
            ("executor_id", "CARILLON_EXECUTOR_ID"),
            ("advertise", "CARILLON_EXECUTOR_ADVERTISE"),
            ("admin_ca", "CARILLON_ADMIN_CA"),
        ):
            if env.get(key):
                defaults[name] = env[key]
        defaults.update({k: v for k, v in settings.items() if v is not None})
        return cls(**defaults)


class RegistrationError(RuntimeError):
    """No admin node accepted the registration."""


def _integer(name: str, text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ExecutorConfigError(name, f"{text!r} is not a whole number") from None


def _bind(listen: str) -> socket.socket:
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ExecutorConfigError("listen", f"{listen!r} is not HOST:PORT")
    host = host.strip("[]") or "127.0.0.1"
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, int(port_text)))
    except OSError as e:
        sock.close()
        raise ExecutorConfigError("listen", f"cannot listen on {listen}: {e}") from None
    sock.set_inheritable(True)
    return sock
