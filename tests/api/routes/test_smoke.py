import httpx

from tests.api.conftest import RAW_S16_16K


def test_status_and_bytes(gateway, default_voice_id):
    assert httpx.get(gateway.url + "/").json()["ok"] is True
    r = httpx.post(gateway.url + "/tts/bytes", json={"model_id": "sonic-3", "transcript": "Hello there.",
                   "voice": default_voice_id, "output_format": RAW_S16_16K}, timeout=60)
    assert r.status_code == 200
    # 24 frames * 1024 samples at 22.05 kHz, resampled to 16 kHz, 2 bytes per sample
    assert len(r.content) == 2 * round(24 * 1024 * 16000 / 22050)
