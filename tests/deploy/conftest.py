"""The live deploy checks reuse the gateway fixtures of tests/api (a real uvicorn server on the tiny
checkpoint). Re-exported here because fixtures are visible only below their conftest.py."""

from tests.api.conftest import default_voice_id, gateway, tiny_ckpt_dir  # noqa: F401
