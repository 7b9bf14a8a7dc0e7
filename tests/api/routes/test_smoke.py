import httpx

from tests.api.conftest import RAW_S16_16K


def test_status_and_bytes(gateway, default_voice_id):
    assert httpx.get(gateway.url + "/").json()["ok"] is True
    r = httpx.post(gateway.url + "/tts/bytes", json={"model_id": "sonic-3", "transcript": "Hello there.",
                   "voice": default_voice_id, "output_format": RAW_S16_16K}, timeout=60)
    assert r.status_code == 200
    # 24 frames * 1024 samples at 22.05 kHz, resampled to 16 kHz, 2 bytes per sample
    assert len(r.content) == 2 * round(24 * 1024 * 16000 / 22050)


def test_unknown_paths_and_methods_answer_in_the_error_shape(gateway):
    """Starlette's router would answer these in plain text; clients parse the JSON error body."""
    with httpx.Client(base_url=gateway.url, timeout=30) as http:
        r = http.post("/tts/byte", json={})
        assert r.status_code == 404 and r.headers["x-should-retry"] == "false"
        body = r.json()
        assert body["error_code"] == "not_found" and body["title"] and body["request_id"] == r.headers["x-request-id"]
        assert "POST /tts/byte" in body["message"]
        r = http.get("/tts/bytes")  # a route, but POST only
        assert r.status_code == 405 and r.headers["allow"] == "POST" and r.headers["x-should-retry"] == "false"
        assert r.json()["error_code"] == "method_not_allowed" and "POST" in r.json()["message"]
        assert http.get("/").status_code == 200  # the connection is still good for the next request
