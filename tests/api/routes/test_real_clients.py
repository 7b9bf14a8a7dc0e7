"""The real pipecat and LiveKit packages against the TLS gateway, changing only the URL.

test_clients.py replays their wire shapes; this runs the packages themselves: pipecat 1.14.0's
``CartesiaTTSService`` and ``CartesiaHttpTTSService`` in a pipeline, and livekit-plugins-cartesia
1.8.9's ``TTS``. They need newer websockets and older protobuf than the server's environment, so they
live in their own virtual environment, ``.venv-clients`` (``./run.sh test`` makes it; the scripts are
in tests/clients/), and each scenario runs as its own process, as an agent does. Trust in the test CA
reaches them through ``SSL_CERT_FILE``, as it would an operator's private CA.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Optional

import pytest

from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.api.routes.audio_checks import expected_bytes, expected_samples, stretched_samples
from tests.api.routes.conftest import API_KEY
from tests.api.routes.ws_helpers import engine_idle

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = ROOT / "tests" / "clients"
RUN_S = 120.0  # one scenario: the packages import in 2-3 s, the tiny model speaks a sentence in well under 1 s
LIVEKIT_MARKER_SAMPLES = 240  # LiveKit's 10 ms of silence marking the end of a synthesis (24 kHz)


@pytest.fixture(scope="module")
def clients_python() -> Path:
    venv = Path(os.environ.get("GEPARD_CLIENTS_VENV", ROOT / ".venv-clients"))
    python = venv / "bin" / "python"
    if not python.exists():
        pytest.skip(f"{venv} is missing: `./run.sh test` installs pipecat and the LiveKit plugin there")
    return python


class Agent:
    """One scenario of a client script, as a process of its own."""

    def __init__(self, python: Path, script: str, scenario: str, base_url: str, voice_id: str, ca_pem: Path) -> None:
        env = {**os.environ, "SSL_CERT_FILE": str(ca_pem), "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen([str(python), str(SCRIPTS / script), scenario, base_url, API_KEY, voice_id],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env=env)

    def wait_between_turns(self) -> None:
        line = self.proc.stdout.readline()
        if line.strip() != "between turns":
            self.proc.kill()
            _, err = self.proc.communicate()
            pytest.fail(f"expected 'between turns', got {line!r}; stderr:\n{err[-4000:]}")

    def result(self, stdin: Optional[str] = None) -> dict:
        try:
            out, err = self.proc.communicate(stdin, timeout=RUN_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            pytest.fail(f"the client ran past {RUN_S} s; stderr:\n{err[-4000:]}")
        lines = out.strip().splitlines()
        assert self.proc.returncode == 0 and lines, f"exit {self.proc.returncode}; stderr:\n{err[-4000:]}"
        return json.loads(lines[-1])


def run_agent(python: Path, script: str, scenario: str, base_url: str, voice_id: str, ca_pem: Path) -> dict:
    return Agent(python, script, scenario, base_url, voice_id, ca_pem).result()


# --- pipecat -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pipecat_turns(clients_python, secure_gateway, tls_files) -> dict:
    """One process (the packages take seconds to import): a WebSocket turn, the same streamed by an
    LLM, one with a missing voice, an HTTP turn; each its own pipeline."""
    from api.app import DEFAULT_VOICE_ID

    return run_agent(clients_python, "pipecat_agent.py", "turns", secure_gateway.url, DEFAULT_VOICE_ID,
                     tls_files.ca_pem)


def test_pipecat_websocket_turn(pipecat_turns):
    got = pipecat_turns["turn"]
    assert got["errors"] == []
    assert got["audio_bytes"] == [3 * expected_bytes(1, "pcm_s16le", 16000)]  # three sentences, one context
    # pipecat paces its transcript by our word timestamps: every word, in order, as the client wrote it
    assert got["words"] == "Hello there! I am your assistant. How can I help?".split()
    types = got["types"]
    audio = [i for i, t in enumerate(types) if t == "TTSAudioRawFrame"]
    assert types.index("TTSStartedFrame") < audio[0] and types.index("TTSStoppedFrame") > audio[-1]


def test_pipecat_turn_streamed_by_an_llm(pipecat_turns):
    # pipecat cuts the tokens into sentences itself, sends each (continue=true) and closes the turn
    got = pipecat_turns["llm"]
    assert got["errors"] == []
    assert got["audio_bytes"] == [3 * expected_bytes(1, "pcm_s16le", 16000)]
    assert got["words"] == "Hello there! I am your assistant. How can I help?".split()


def test_pipecat_missing_voice_is_an_error_frame_with_our_message(pipecat_turns):
    got = pipecat_turns["missing_voice"]
    assert got["audio_bytes"] == []
    assert "voice_not_found" in got["errors"][0] and "'missing'" in got["errors"][0], got["errors"]


def test_pipecat_http_service(pipecat_turns):
    got = pipecat_turns["http"]
    assert got["errors"] == []
    assert got["audio_bytes"] == [3 * expected_bytes(1, "pcm_s16le", 16000)]


def test_pipecat_interruption_stops_the_turn_and_the_socket_serves_the_next(
        clients_python, secure_gateway, tls_files, default_voice_id):
    agent = Agent(clients_python, "pipecat_agent.py", "interrupt", secure_gateway.url, default_voice_id,
                  tls_files.ca_pem)
    agent.wait_between_turns()
    # the socket is still open: the interrupted 40-sentence turn must not be generating any more
    idle = engine_idle(secure_gateway, timeout_s=5.0, hold_s=1.0)
    got = agent.result("\n")["interrupt"]
    assert idle, "the interrupted context kept the engine busy after pipecat's cancel"
    assert got["errors"] == []
    interrupted, answered = got["audio_bytes"]
    assert 0 < interrupted < 40 * expected_bytes(1, "pcm_s16le", 16000)
    assert answered == expected_bytes(1, "pcm_s16le", 16000)
    assert got["words"][-3:] == ["Sure,", "go", "ahead."]


@pytest.fixture(scope="module")
def idle_gateway(tiny_ckpt_dir, tmp_path_factory):
    """Closes a socket idle for 1 s, as Cartesia does after 5 minutes (plain ws, key required)."""
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("idle-data"), api_keys={API_KEY},
                                ws_idle_timeout_s=1.0)
    with LiveServer(settings) as server:
        yield server


def test_pipecat_speaks_on_after_the_server_closed_its_idle_socket(
        clients_python, idle_gateway, tls_files, default_voice_id):
    # an agent's call with a long silence: the idle close is clean, pipecat opens the socket again
    # at once, and the next turn on that socket loses no audio and reports no error
    got = run_agent(clients_python, "pipecat_agent.py", "idle", idle_gateway.url, default_voice_id,
                    tls_files.ca_pem)["idle"]
    assert got["errors"] == []
    assert got["connects"] >= 2
    assert got["audio_bytes"] == [3 * expected_bytes(1, "pcm_s16le", 16000), expected_bytes(1, "pcm_s16le", 16000)]


# --- LiveKit -----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def livekit_turns(clients_python, secure_gateway, tls_files) -> list[dict]:
    """One process: synthesize() over /tts/bytes, then three streams over one pooled socket, the
    last at speed 1.25."""
    from api.app import DEFAULT_VOICE_ID

    return run_agent(clients_python, "livekit_agent.py", "turns", secure_gateway.url, DEFAULT_VOICE_ID,
                     tls_files.ca_pem)["syntheses"]


def test_livekit_synthesize_over_bytes(livekit_turns):
    synthesis = livekit_turns[0]
    assert synthesis["samples"] - LIVEKIT_MARKER_SAMPLES == expected_samples(3, 24000)


def test_livekit_streams_reuse_the_socket_with_aligned_words(livekit_turns):
    _, first, second, _ = livekit_turns
    # LiveKit aligns our words to the text it sent: they must be its own tokens, punctuation attached
    assert first == {"samples": expected_samples(3, 24000),
                     "words": "Hi, I'm Kelly. It's 9:30 now - let's go! How can I help?".split()}
    assert second == {"samples": expected_samples(1, 24000), "words": ["Second", "stream."]}


def test_livekit_speed_and_emotion_options(livekit_turns):
    # LiveKit sends them as sonic-3's generation_config: the speed stretches the speech, the
    # emotion is accepted and ignored
    assert livekit_turns[3] == {"samples": stretched_samples(1, 1.25, 24000), "words": ["Faster", "now."]}


def test_livekit_interruption_stops_the_work(clients_python, secure_gateway, tls_files, default_voice_id):
    agent = Agent(clients_python, "livekit_agent.py", "interrupt", secure_gateway.url, default_voice_id,
                  tls_files.ca_pem)
    agent.wait_between_turns()
    idle = engine_idle(secure_gateway, timeout_s=5.0, hold_s=1.0)
    got = agent.result("\n")
    assert idle, "the interrupted stream kept the engine busy after LiveKit closed its socket"
    interrupted, answered = got["syntheses"]
    assert 0 < interrupted["samples"] < expected_samples(40, 24000)
    assert answered == {"samples": expected_samples(1, 24000), "words": ["Sure,", "go", "ahead."]}
