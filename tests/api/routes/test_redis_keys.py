"""API keys kept in Redis (``gepard keys add``) authenticate on every replica sharing that Redis."""

import httpx
import pytest

from api.cli import main
from tests.api.conftest import gateway_settings
from tests.api.live import LiveServer
from tests.voices.redis_server import RedisServer

KEY = "k-redis-0123456789abcdef"


@pytest.fixture(scope="module")
def redis_gateway(tiny_ckpt_dir, tmp_path_factory):
    redis = RedisServer.start()
    settings = gateway_settings(tiny_ckpt_dir, tmp_path_factory.mktemp("keys-data"), redis_url=redis.url, require_auth=True)
    with LiveServer(settings) as server:
        yield server, redis
    redis.stop()


def _voices(server, key):
    return httpx.get(server.url + "/voices", headers={"Authorization": f"Bearer {key}"}, timeout=30)


def test_keys_added_through_the_cli_authenticate_and_removed_ones_do_not(redis_gateway, capsys):
    server, redis = redis_gateway
    assert _voices(server, KEY).status_code == 401
    assert main(["keys", "add", KEY, "--redis-url", redis.url]) == 0
    assert _voices(server, KEY).status_code == 200
    assert httpx.get(server.url + "/voices", headers={"X-API-Key": KEY}, timeout=30).status_code == 200
    assert _voices(server, "k-someone-else-000000").status_code == 401
    assert main(["keys", "remove", KEY, "--redis-url", redis.url]) == 0
    assert _voices(server, KEY).status_code == 401
    assert "added" in capsys.readouterr().out


def test_short_keys_are_refused(redis_gateway, capsys):
    _, redis = redis_gateway
    assert main(["keys", "add", "short", "--redis-url", redis.url]) == 2
    assert "at least 16 characters" in capsys.readouterr().err
