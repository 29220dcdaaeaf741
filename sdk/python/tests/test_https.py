"""HTTPS both ways, as the Rust SDK offers it: the executor serves HTTPS and requires the
node's client certificate (mutual TLS), and reaches an HTTPS node trusting its CA."""

from __future__ import annotations

import ssl
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, Iterator

import httpx
import pytest

from conftest import ExecutorProcess, Node, unique


def openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki() -> Dict[str, str]:
    """A CA, a certificate for 127.0.0.1 (the node's and the executor's), and a client
    certificate the node presents to executors."""
    d = Path(tempfile.mkdtemp(prefix="carillon-py-pki-"))
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"), "-days", "2", "-subj", "/CN=test CA")
    for name, extension in (("server", "subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
                            ("client", "extendedKeyUsage=clientAuth")):
        (d / f"{name}.ext").write_text(extension + "\n")
        openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"), "-subj", f"/CN={name}")
        openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"),
                "-CAkey", str(d / "ca.key"), "-CAcreateserial", "-days", "2",
                "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.pem"))
    return {name: str(d / name) for name in
            ("ca.pem", "server.pem", "server.key", "client.pem", "client.key")}


@pytest.fixture(scope="module")
def https_node(pki: Dict[str, str]) -> Iterator[Node]:
    node = Node("", {
        "CARILLON_HTTP_TLS_CERT": pki["server.pem"], "CARILLON_HTTP_TLS_KEY": pki["server.key"],
        "CARILLON_DISPATCH_TLS_CA": pki["ca.pem"],
        "CARILLON_DISPATCH_TLS_CLIENT_CERT": pki["client.pem"],
        "CARILLON_DISPATCH_TLS_CLIENT_KEY": pki["client.key"],
    }, https_ca=pki["ca.pem"])
    try:
        yield node
    finally:
        node.stop()


def test_mutual_tls_between_node_and_executor(https_node: Node, pki: Dict[str, str]) -> None:
    app = unique("mtls")
    executor = ExecutorProcess(
        https_node, app, "suite", "--tls-cert", pki["server.pem"], "--tls-key", pki["server.key"],
        "--client-ca", pki["ca.pem"], "--admin-ca", pki["ca.pem"])
    try:
        [registered] = https_node.executors(app)
        assert registered["address"].startswith("https://127.0.0.1:")
        run = https_node.wait_run_ended(https_node.trigger(https_node.create_job(
            name=unique("over-tls"), app=app, handler="work", args={"sleep": 0})))
        assert run["state"] == "succeeded", run
        # Without the node's client certificate, the executor's endpoint does not answer.
        trusting = ssl.create_default_context(cafile=pki["ca.pem"])
        with pytest.raises(httpx.HTTPError):
            httpx.post(f"{registered['address']}/carillon/v1/dispatch", content=b"{}",
                       verify=trusting, timeout=5)
        trusting.load_cert_chain(pki["client.pem"], pki["client.key"])
        signed_in = httpx.post(f"{registered['address']}/carillon/v1/dispatch", content=b"{}",
                               verify=trusting, timeout=5)
        assert signed_in.status_code == 401  # through TLS, then refused: no signature
    finally:
        assert executor.stop() == 0, executor.output()
