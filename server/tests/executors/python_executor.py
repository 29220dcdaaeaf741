#!/usr/bin/env python3
"""A Carillon executor in plain Python (standard library only), written from protocol/README.md.

Handlers:
  echo     -> answers 200 at once with {"args": ..., "shard": ...}
  slow     -> answers 202, sleeps `args.seconds` (default 3) logging a line every 0.5 s
              (POST /api/v1/executors/logs), reports succeeded
  fail     -> answers 200 with outcome failed
  flaky    -> fails when this executor runs with --fail, succeeds otherwise
  secrets  -> answers 200 with the names of the dispatch's secrets and a SHA-256 of each value
              (never the value)
  stall    -> takes the dispatch and says nothing for `args.seconds` (default 30), then answers
              200 (an executor gone silent while its heartbeats go on)
With --hang, `slow` answers 202 and then never reports nor honours a cancel (a stuck handler).
A dispatch with an `effect_key` (delivery `exactly_once_effect`) whose work an `echo` here
already did is answered from the record, the handler not run again (logged `from_record`).
Prints "listening <port>" once it serves.
"""
import argparse, hashlib, hmac, json, sys, threading, time, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

p = argparse.ArgumentParser()
p.add_argument("--admin", required=True)
p.add_argument("--token", required=True)
p.add_argument("--secret", required=True)
p.add_argument("--app", default="py")
p.add_argument("--id", required=True)
p.add_argument("--weight", type=int, default=1)
p.add_argument("--capacity", type=int, default=8)
p.add_argument("--fail", action="store_true")
p.add_argument("--hang", action="store_true")
p.add_argument("--host", default="127.0.0.1", help="the address to listen on and register")
args = p.parse_args()

lock = threading.Lock()
running = {}          # attempt_id -> threading.Event (set = cancel)
seen = {}             # attempt_id -> accepted at (ms), for replay refusal
log = []              # what this executor did, for the test to read at /log
effects = {}          # effect_key -> the answer its echo gave


def now_ms():
    return int(time.time() * 1000)


def call(path, body):
    req = urllib.request.Request(args.admin + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + args.token})
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.loads(r.read() or b"null")


def verified(headers, body):
    ts = headers.get("X-Carillon-Timestamp", "")
    if not ts.isdigit() or abs(now_ms() - int(ts)) > 300_000:
        return False
    expected = "v1=" + hmac.new(args.secret.encode(), ts.encode() + b"." + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("X-Carillon-Signature", ""))


def report(dispatch, outcome, output=None, error=None):
    body = {"executor_id": args.id, "attempt_id": dispatch["attempt_id"], "outcome": outcome,
            "handle": dispatch.get("handle")}
    if output is not None:
        body["output"] = output
    if error is not None:
        body["error"] = error
    for _ in range(50):
        for base in dispatch["report_to"] + [args.admin]:
            try:
                call_to(base, "/api/v1/executors/results", body)
                return
            except Exception:
                time.sleep(0.2)


def call_to(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": "Bearer " + args.token})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.read()


def ship_log(dispatch, line, message):
    """Sends one line of the handler's log (protocol/README.md, *Handler logs*); best effort."""
    body = {"executor_id": args.id, "attempts": [{"attempt_id": dispatch["attempt_id"],
                                                 "handle": dispatch.get("handle"), "lines": [
        {"line": line, "at_ms": now_ms(), "level": "INFO", "message": message}]}]}
    for base in dispatch["report_to"] + [args.admin]:
        try:
            call_to(base, "/api/v1/executors/logs", body)
            return
        except Exception:
            pass


def run_slow(dispatch, cancel):
    seconds = (dispatch["args"] or {}).get("seconds", 3) if isinstance(dispatch["args"], dict) else 3
    # A line of log every half second while it sleeps, one with markup in it.
    deadline = time.time() + seconds
    line = 0
    cancelled = False
    while not cancelled:
        left = deadline - time.time()
        if left <= 0:
            break
        line += 1
        ship_log(dispatch, line, f"slow step {line} <b>not bold</b>")
        cancelled = cancel.wait(min(0.5, left))
    with lock:
        running.pop(dispatch["attempt_id"], None)
    if cancelled:
        log.append({"cancelled": dispatch["attempt_id"]})
        report(dispatch, "cancelled", error="cancelled")
    else:
        report(dispatch, "succeeded", output={"slept": seconds, "by": args.id})


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def reply(self, status, body=None):
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/log":
            with lock:
                self.reply(200, log)
        else:
            self.reply(404)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if not verified(self.headers, body):
            log.append({"refused": "signature"})
            return self.reply(401, {"error": "signature does not verify"})
        msg = json.loads(body)
        if self.path == "/carillon/v1/cancel":
            with lock:
                ev = running.get(msg["attempt_id"])
            if ev:
                ev.set()
            return self.reply(200, {})
        if self.path != "/carillon/v1/dispatch":
            return self.reply(404)
        key = msg.get("effect_key")
        with lock:
            done = effects.get(key) if key else None
            if done is not None:
                log.append({"from_record": key, "attempt_id": msg["attempt_id"], "run_id": msg["run_id"],
                            "job_id": msg["job_id"], "received_ms": now_ms()})
        if done is not None:
            return self.reply(200, done)
        with lock:
            if msg["attempt_id"] in seen:
                return self.reply(409, {"error": "replayed attempt"})
            if len(running) >= args.capacity:
                return self.reply(429, {"error": "busy"})
            seen[msg["attempt_id"]] = now_ms()
            log.append({"attempt_id": msg["attempt_id"], "run_id": msg["run_id"], "handler": msg["handler"],
                        "args": msg["args"], "shard": msg["shard"], "attempt": msg["attempt"],
                        "job_id": msg["job_id"], "scheduled_at": msg["scheduled_at"],
                        "input": msg.get("input"), "report_to": msg.get("report_to", []),
                        "effect_key": key, "received_ms": now_ms()})
        handler = msg["handler"]
        if handler == "echo":
            answer = {"outcome": "succeeded", "output": {"args": msg["args"], "shard": msg["shard"], "by": args.id,
                                                        "scheduled_at": msg["scheduled_at"]}}
            if key:
                with lock:
                    effects[key] = answer
            return self.reply(200, answer)
        if handler == "fail" or (handler == "flaky" and args.fail):
            return self.reply(200, {"outcome": "failed", "error": "failed on " + args.id})
        if handler == "flaky":
            return self.reply(200, {"outcome": "succeeded", "output": {"by": args.id}})
        if handler == "secrets":
            carried = msg.get("secrets", {})
            return self.reply(200, {"outcome": "succeeded", "output": {
                "sha256": {k: hashlib.sha256(v.encode()).hexdigest() for k, v in carried.items()}}})
        if handler == "stall":
            seconds = (msg["args"] or {}).get("seconds", 30) if isinstance(msg["args"], dict) else 30
            time.sleep(seconds)
            return self.reply(200, {"outcome": "succeeded", "output": {"stalled": seconds}})
        if handler == "quiet":  # a plain success: no output
            return self.reply(200, {"outcome": "succeeded"})
        if handler == "slow" and args.hang:
            with lock:  # listed as in flight by heartbeats, like any stuck handler
                running[msg["attempt_id"]] = threading.Event()
            return self.reply(202, {})
        if handler == "slow":
            ev = threading.Event()
            with lock:
                running[msg["attempt_id"]] = ev
            threading.Thread(target=run_slow, args=(msg, ev), daemon=True).start()
            return self.reply(202, {})
        return self.reply(404, {"error": "no handler " + handler})


class Server(ThreadingHTTPServer):
    # Nodes dispatch concurrently: socketserver's default backlog of 5 refuses bursts.
    request_queue_size = 128

    def handle_error(self, request, client_address):
        # A node that stopped waiting (its call timed out, or it was killed) closes the
        # connection before the answer: that is the node's business, not an error here.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


server = Server((args.host, 0), Handler)
port = server.server_address[1]
registration = {"protocol": 1, "executor_id": args.id, "app": args.app,
                "address": f"http://{args.host}:{port}", "weight": args.weight, "capacity": args.capacity,
                "handlers": [{"name": n, "description": "python"} for n in ("echo", "slow", "fail", "flaky", "quiet", "secrets", "stall")]}
accepted = call("/api/v1/executors/register", registration)


def heartbeat():
    while True:
        time.sleep(accepted["heartbeat_interval_ms"] / 1000)
        try:
            with lock:
                in_flight = list(running.keys())
            reply = call("/api/v1/executors/heartbeat", {"executor_id": args.id, "in_flight": in_flight})
            if not reply.get("registered"):
                call("/api/v1/executors/register", registration)
            for a in reply.get("cancel", []):
                with lock:
                    ev = running.get(a)
                if ev:
                    ev.set()
        except Exception:
            pass


threading.Thread(target=heartbeat, daemon=True).start()
print(f"listening {port}", flush=True)
server.serve_forever()
