"""An existing Flask service that serves the executor's endpoint under /carillon and runs the
executor on a thread of its own (a WSGI service has no event loop)."""

import os
import signal
import threading

import suite  # noqa: F401  (its @job handlers are the executor's)
from flask import Flask
from werkzeug.middleware.dispatcher import DispatcherMiddleware
from werkzeug.serving import make_server

from carillon_executor import Executor

executor = Executor.from_env(app=os.environ["EMBEDDED_APP"])
app = Flask(__name__)


@app.get("/health")
def health() -> str:
    return "the service's own route"


app.wsgi_app = DispatcherMiddleware(app.wsgi_app, {"/carillon": executor.wsgi})  # type: ignore[method-assign]

if __name__ == "__main__":
    port = int(os.environ["EMBEDDED_PORT"])
    server = make_server("127.0.0.1", port, app, threaded=True)
    executor.start_background(advertise=f"http://127.0.0.1:{port}")
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown).start())
    server.serve_forever()
    executor.stop_background()
