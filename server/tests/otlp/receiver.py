"""An OTLP/HTTP trace receiver for the tests: decodes each `POST /v1/traces` body as
OpenTelemetry's `ExportTraceServiceRequest` (PyPI's opentelemetry-proto, the project's own
generated types), keeps its spans, and serves them as JSON at `GET /spans`.

Prints `listening <port>` once it listens on 127.0.0.1 (port 0: any free one). A body that
does not decode is answered 400 and counted in `GET /spans`' `refused`, so a test sees it.
With `--count` it keeps only how many spans came (`GET /spans` answers `{"count": n}`): the
bench's collector, costing the machine little more than the decoding.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

LOCK = threading.Lock()
SPANS = []
REFUSED = []
COUNT_ONLY = "--count" in sys.argv
COUNTED = [0]


def value_of(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {kv.key: value_of(kv.value) for kv in pairs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
            self.answer(404, b"", "text/plain")
            return
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as error:  # noqa: BLE001 - any decode failure is the test's finding
            with LOCK:
                REFUSED.append(str(error))
            self.answer(400, str(error).encode(), "text/plain")
            return
        if COUNT_ONLY:
            counted = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
            with LOCK:
                COUNTED[0] += counted
            self.answer(200, b"", "application/x-protobuf")
            return
        spans = []
        for resource_spans in request.resource_spans:
            resource = attributes(resource_spans.resource.attributes)
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    spans.append(
                        {
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "name": span.name,
                            "kind": span.kind,
                            "start_ns": span.start_time_unix_nano,
                            "end_ns": span.end_time_unix_nano,
                            "status_code": span.status.code,
                            "attributes": attributes(span.attributes),
                            "resource": resource,
                            "scope": scope_spans.scope.name,
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                        }
                    )
        with LOCK:
            SPANS.extend(spans)
        self.answer(200, ExportTraceServiceResponse().SerializeToString(), "application/x-protobuf")

    def do_GET(self):
        with LOCK:
            if COUNT_ONLY:
                body = json.dumps({"count": COUNTED[0], "refused": REFUSED}).encode()
            else:
                body = json.dumps({"spans": SPANS, "refused": REFUSED}).encode()
        self.answer(200, body, "application/json")

    def answer(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    numbers = [arg for arg in sys.argv[1:] if arg.isdigit()]
    port = int(numbers[0]) if numbers else 0
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening {server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
