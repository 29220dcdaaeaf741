"""A TCP proxy in front of an executor that can lose the executor's answers: the request
reaches the executor, which acts on it, and the node sees its connection reset instead of the
answer, as when a network drops the reply."""

from __future__ import annotations

import socket
import struct
import threading
from typing import Tuple


class LossyProxy:
    def __init__(self, target: Tuple[str, int]) -> None:
        self.target = target
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._lock = threading.Lock()
        self._lose = 0
        self.lost = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def lose_next_answers(self, count: int) -> None:
        with self._lock:
            self._lose = count

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _take_loss(self) -> bool:
        with self._lock:
            if self._lose > 0:
                self._lose -= 1
                self.lost += 1
                return True
            return False

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(self.target)
        threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                if self._take_loss():
                    # Reset, not close: the node must not read a partial answer as one.
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            client.close()
            upstream.close()

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass

    def close(self) -> None:
        self._server.close()
