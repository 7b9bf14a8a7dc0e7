"""The published JS SDK (@cartesia/cartesia-js 4.2.0, tests/api/js) in Node against the TLS
gateway: REST, SSE, WebSocket contexts over wss with query-string credentials (the SDK's browser
path, which ESM in Node takes), access tokens, typed errors.

The package is installed into tests/api/js/node_modules (git-ignored) by this test on first use
(``npm install --no-package-lock``, ~2 s). Without node/npm or the package this test fails,
saying why: it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.api.routes.audio_checks import expected_bytes
from tests.api.routes.conftest import API_KEY
from tests.api.routes.test_phoneme_timestamps import spoken_phonemes

JS_DIR = Path(__file__).resolve().parents[1] / "js"
SDK_VERSION = "4.2.0"

pytestmark = pytest.mark.timeout(300)


def _installed_version() -> str | None:
    manifest = JS_DIR / "node_modules" / "@cartesia" / "cartesia-js" / "package.json"
    return json.loads(manifest.read_text())["version"] if manifest.is_file() else None


@pytest.fixture(scope="module")
def node() -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed: the JS SDK test needs Node.js 20+ (apt-get install nodejs npm)")
    if _installed_version() != SDK_VERSION:
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is not installed: cannot install @cartesia/cartesia-js for the JS SDK test")
        proc = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--no-package-lock"], cwd=JS_DIR,
                              capture_output=True, text=True, timeout=240)
        if proc.returncode != 0 or _installed_version() != SDK_VERSION:
            pytest.fail(f"npm install of @cartesia/cartesia-js@{SDK_VERSION} in {JS_DIR} failed "
                        f"(is the npm registry reachable?):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    major = int(subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip().lstrip("v").split(".")[0])
    # the SDK's ESM build uses the global WebSocket, built in from Node 22 and behind a flag in 20-21
    return [node] + (["--experimental-websocket"] if major < 22 else [])


def test_js_sdk_against_the_tls_gateway(node, secure_gateway, tls_files, default_voice_id):
    env = {**os.environ, "NODE_EXTRA_CA_CERTS": str(tls_files.ca_pem), "NODE_NO_WARNINGS": "1"}
    proc = subprocess.run([*node, "drive_sdk.mjs", secure_gateway.url, API_KEY, default_voice_id], cwd=JS_DIR,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"node failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    out = json.loads(proc.stdout.strip().splitlines()[-1])

    assert out["status"]["ok"] is True
    assert out["bytes"] == {"status": 200, "length": expected_bytes(1, "pcm_s16le", 16000)}

    sse = out["sse"]
    assert sse["types"][-1] == "done" and sse["types"].count("done") == 1 and "timestamps" in sse["types"]
    assert sse["audio"] == expected_bytes(2, "pcm_f32le", 24000)
    assert sse["words"] == ["Hello", "there,", "friend.", "Bye", "now."]
    assert sse["phonemes"] == spoken_phonemes("Hello there, friend. Bye now.")

    seg16 = expected_bytes(1, "pcm_s16le", 16000)
    a, b = out["ws"]["a"], out["ws"]["b"]
    assert [e["type"] for e in a].count("done") == 1 and a[-1]["type"] == "done"
    assert all(e["context_id"] == "js-a" for e in a) and all(e["context_id"] == "js-b" for e in b)
    assert [e["flush_id"] for e in a if e["type"] == "flush_done"] == [1]
    assert sum(e["audio"] for e in a if e["type"] == "chunk" and e["flush_id"] == 1) == seg16
    assert sum(e["audio"] for e in a if e["type"] == "chunk" and e["flush_id"] == 2) == seg16
    assert [w for e in a if e["words"] for w in e["words"]] == ["Hello", "there.", "How", "are", "you?"]
    assert [p for e in a if e["phonemes"] for p in e["phonemes"]] == spoken_phonemes("Hello there. How are you?")
    assert not any(e["phonemes"] for e in b)  # only the context that asked
    assert b[-1]["type"] == "done" and sum(e["audio"] for e in b) == expected_bytes(1, "pcm_f32le", 24000)

    assert out["wsError"]["isCartesiaError"] and "js-missing-voice" in out["wsError"]["message"]
    assert out["wsError"]["emitted"]  # the error event also reached the emitter
    assert out["token"][-1]["type"] == "done" and sum(e["audio"] for e in out["token"]) == seg16
    assert out["restError"] == {"notFound": True, "status": 404, "code": "voice_not_found"}
    assert out["authError"] == {"status": 401}
