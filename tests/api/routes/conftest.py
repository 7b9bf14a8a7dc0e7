"""Fixtures of the route tests: a throwaway CA, and one TLS + API-key gateway shared by the session.

``gateway`` (tests/api/conftest.py) serves plain HTTP with auth off; ``secure_gateway`` serves
https and wss on one port (what the JS SDK needs) and requires ``API_KEY``. Both are real uvicorn
servers on loopback running the tiny checkpoint.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer

API_KEY = "sk_test_routes_0123456789"


@dataclass(frozen=True)
class TlsFiles:
    ca_pem: Path  # the CA certificate clients trust
    cert_pem: Path  # server certificate chain for 127.0.0.1 and localhost
    key_pem: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_pem))


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    import trustme

    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    folder = tmp_path_factory.mktemp("tls")
    files = TlsFiles(folder / "ca.pem", folder / "server.pem", folder / "server.key")
    ca.cert_pem.write_to_path(str(files.ca_pem))
    cert.private_key_and_cert_chain_pem.write_to_path(str(files.cert_pem))
    cert.private_key_pem.write_to_path(str(files.key_pem))
    return files


@pytest.fixture(scope="session")
def secure_gateway(tiny_ckpt_dir: Path, tmp_path_factory: pytest.TempPathFactory, tls_files: TlsFiles):
    """https + wss on one port, API key required (Settings carries the TLS files too)."""
    settings = gateway_settings(
        tiny_ckpt_dir, tmp_path_factory.mktemp("secure-data"), api_keys={API_KEY},
        tls_certfile=tls_files.cert_pem, tls_keyfile=tls_files.key_pem,
        token_secret=b"route-tests-token-secret-0123456789",
    )
    with LiveServer(settings, ssl=(str(tls_files.cert_pem), str(tls_files.key_pem))) as server:
        yield server
