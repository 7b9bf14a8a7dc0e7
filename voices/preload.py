"""Start-up preload: every clip in a directory becomes a stored, read-only voice, once.

    report = await preload_voices("/data/voices", cloner, language="en")

- Each ``*.wav|*.flac|*.ogg|*.mp3`` file is one voice named after its stem (``linda.wav`` ->
  ``linda``). An optional ``<stem>.json`` next to it may set ``name``, ``description``,
  ``language``, ``gender`` and ``accent``.
- The voice id is a UUID5 of the clip's SHA-256 and the model fingerprint: a restart (or a
  second replica starting at the same time) finds the voice already stored and skips the
  encoding; a new checkpoint yields new ids, since the old prefixes do not fit it.
- Preloaded voices are stored with ``builtin=True`` (public, listed, not patchable or deletable
  through the API; ``store.delete(id, allow_builtin=True)`` removes one).
- A clip that cannot be cloned is logged and reported, and the others still load.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from voices.cloning import VoiceCloner
from voices.errors import InvalidVoiceError, VoiceExistsError, VoiceNotFoundError, VoiceStoreError
from voices.models import Voice

logger = logging.getLogger(__name__)

CLIP_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
_SIDECAR_FIELDS = frozenset({"name", "description", "language", "gender", "accent"})
#: Namespace of preloaded voice ids (a fixed random UUID; changing it re-creates every voice).
PRELOAD_NAMESPACE = uuid.UUID("5b0e2a4c-5f0d-4d8e-9d3a-6a1f3c2e7b91")


@dataclass(slots=True)
class PreloadReport:
    created: list[Voice] = field(default_factory=list)  # cloned and stored now
    existing: list[Voice] = field(default_factory=list)  # already stored (restart)
    failed: dict[str, str] = field(default_factory=dict)  # file name -> error message

    @property
    def voices(self) -> list[Voice]:
        return self.created + self.existing


def preload_voice_id(clip: bytes, model_fingerprint: str) -> str:
    """Deterministic id of a preloaded clip: UUID5(sha256(clip) + ':' + fingerprint)."""
    digest = hashlib.sha256(clip).hexdigest()
    return str(uuid.uuid5(PRELOAD_NAMESPACE, f"{digest}:{model_fingerprint}"))


def _read_sidecar(path: Path) -> dict[str, Any]:
    sidecar = path.with_suffix(".json")
    if not sidecar.is_file():
        return {}
    try:
        data = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InvalidVoiceError(f"{sidecar.name}: not readable JSON: {exc}") from exc
    if not isinstance(data, dict) or set(data) - _SIDECAR_FIELDS:
        extra = sorted(set(data) - _SIDECAR_FIELDS) if isinstance(data, dict) else type(data).__name__
        raise InvalidVoiceError(f"{sidecar.name}: expected an object with {sorted(_SIDECAR_FIELDS)}, got {extra}")
    return data


async def preload_voices(directory: str | os.PathLike[str], cloner: VoiceCloner, *,
                         language: str = "en") -> PreloadReport:
    """Clone every clip in ``directory`` not stored yet; idempotent (see the module docstring).

    Store outages propagate (start-up should fail or retry); bad clips are reported in
    ``PreloadReport.failed`` and logged.
    """
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"voice preload directory {str(root)!r} does not exist")
    report = PreloadReport()
    for path in sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in CLIP_SUFFIXES):
        try:
            clip = path.read_bytes()
            meta = _read_sidecar(path)
        except (OSError, InvalidVoiceError) as exc:
            report.failed[path.name] = str(exc)
            logger.error("voice preload: %s skipped: %s", path.name, exc)
            continue
        voice_id = preload_voice_id(clip, cloner.model_fingerprint)
        # 1) already stored by an earlier start (or another replica)?
        try:
            report.existing.append(await cloner.store.get(voice_id))
            continue
        except VoiceNotFoundError:
            pass
        # 2) clone it under the deterministic id
        try:
            voice = await cloner.clone(
                clip, path.name, None, meta.get("name", path.stem), meta.get("language", language),
                description=meta.get("description"), gender=meta.get("gender"), accent=meta.get("accent"),
                voice_id=voice_id, builtin=True,
            )
        except VoiceExistsError:  # a replica starting alongside stored it first
            report.existing.append(await cloner.store.get(voice_id))
            continue
        except VoiceStoreError as exc:
            if exc.retryable:
                raise
            report.failed[path.name] = str(exc)
            logger.error("voice preload: %s failed: %s", path.name, exc)
            continue
        report.created.append(voice)
    logger.info("voice preload from %s: %d created, %d already stored, %d failed", root,
                len(report.created), len(report.existing), len(report.failed))
    return report
