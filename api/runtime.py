"""Shared start-up pieces for the CLI and the server: where the codec lives, loading it."""

from __future__ import annotations

import os
from pathlib import Path

from engine.config import GepardConfig

CODEC_ENV = "GEPARD_CODEC"


def codec_source(model_dir: Path | None, override: str | None = None) -> str:
    """The codec to load: --codec / $GEPARD_CODEC, else the checkpoint's ``codec.codec_id``
    (a file beside the checkpoint when one exists by that name, otherwise a Hugging Face id)."""
    chosen = override or os.environ.get(CODEC_ENV)
    if chosen:
        return chosen
    if model_dir is None:
        return GepardConfig.__dataclass_fields__["codec"].default_factory().codec_id  # type: ignore[misc]
    codec_id = GepardConfig.from_dir(model_dir).codec.codec_id
    local = model_dir / codec_id
    return str(local) if local.exists() else codec_id
