"""Start-up preload: every clip in a directory becomes a stored, read-only voice, once.

    report = await preload_voices("/data/voices", cloner, language="en")

- Each ``*.wav|*.flac|*.ogg|*.mp3`` file is one voice named after its stem (``linda.wav`` ->
  ``linda``). An optional ``<stem>.json`` next to it may set ``name``, ``description``,
  ``language``, ``gender`` and ``accent``.
- The voice id is a UUID5 of the clip's SHA-256: a restart (or a second replica starting at the
  same time) finds the voice already stored and skips the encoding. The id outlives checkpoint
  changes, so clients keep it: a voice stored under another checkpoint has its prefix recomputed
  here from its stored reference codes (voices/recompute.py), one compressor pass per clip.
- Earlier versions made one id per clip *and checkpoint* (UUID5 of SHA-256 + ':' + fingerprint),
  which left the old checkpoint's copy listed beside the new one. A start that clones a clip
  (the first after this change, or a new clip) scans the stored voices once and deletes the
  copies of this directory's clips under such ids; a restart with nothing new scans nothing.
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
from voices.listing import MAX_LIST_LIMIT
from voices.models import Voice
from voices.store import VoiceStore

logger = logging.getLogger(__name__)

CLIP_SUFFIXES = (".wav", ".flac", ".ogg", ".mp3")
_SIDECAR_FIELDS = frozenset({"name", "description", "language", "gender", "accent"})
#: Namespace of preloaded voice ids (a fixed random UUID; changing it re-creates every voice).
PRELOAD_NAMESPACE = uuid.UUID("5b0e2a4c-5f0d-4d8e-9d3a-6a1f3c2e7b91")


@dataclass(slots=True)
class PreloadReport:
    created: list[Voice] = field(default_factory=list)  # cloned and stored now
    existing: list[Voice] = field(default_factory=list)  # already stored for this checkpoint (restart)
    recomputed: list[Voice] = field(default_factory=list)  # stored for another checkpoint; prefix redone
    removed: list[str] = field(default_factory=list)  # ids of copies under the old per-checkpoint ids
    failed: dict[str, str] = field(default_factory=dict)  # file name -> error message

    @property
    def voices(self) -> list[Voice]:
        return self.created + self.existing + self.recomputed


def preload_voice_id(clip: bytes) -> str:
    """Deterministic id of a preloaded clip, the same for every checkpoint: UUID5(sha256(clip))."""
    return str(uuid.uuid5(PRELOAD_NAMESPACE, hashlib.sha256(clip).hexdigest()))


def _old_preload_voice_id(digest: str, model_fingerprint: str) -> str:
    """The id earlier versions gave a clip (SHA-256 hex ``digest``) for one checkpoint."""
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
    digests: set[str] = set()
    for path in sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in CLIP_SUFFIXES):
        try:
            clip = path.read_bytes()
            meta = _read_sidecar(path)
        except (OSError, InvalidVoiceError) as exc:
            report.failed[path.name] = str(exc)
            logger.error("voice preload: %s skipped: %s", path.name, exc)
            continue
        digests.add(hashlib.sha256(clip).hexdigest())
        try:
            await _preload_clip(path, clip, meta, cloner, language, report)
        except VoiceStoreError as exc:
            if exc.retryable:
                raise
            report.failed[path.name] = str(exc)
            logger.error("voice preload: %s failed: %s", path.name, exc)
    if report.created:  # a first start after the id change, or a new clip: old copies may be stored
        report.removed = await _remove_old_copies(cloner.store, digests)
    logger.info("voice preload from %s: %d created, %d already stored, %d recomputed for this checkpoint, "
                "%d old copies removed, %d failed", root, len(report.created), len(report.existing),
                len(report.recomputed), len(report.removed), len(report.failed))
    return report


async def _preload_clip(path: Path, clip: bytes, meta: dict[str, Any], cloner: VoiceCloner, language: str,
                        report: PreloadReport) -> None:
    """Store one clip's voice under its id, or bring the stored one to this checkpoint."""
    voice_id = preload_voice_id(clip)
    # 1) already stored by an earlier start (or another replica), maybe for another checkpoint?
    try:
        stored = await cloner.store.get(voice_id)
    except VoiceNotFoundError:
        stored = None
    if stored is not None:
        if stored.model_fingerprint == cloner.model_fingerprint:
            report.existing.append(stored)
        else:
            report.recomputed.append(await cloner.recompute(voice_id))
        return
    # 2) clone it under the deterministic id
    try:
        voice = await cloner.clone(
            clip, path.name, None, meta.get("name", path.stem), meta.get("language", language),
            description=meta.get("description"), gender=meta.get("gender"), accent=meta.get("accent"),
            voice_id=voice_id, builtin=True,
        )
    except VoiceExistsError:  # a replica starting alongside stored it first
        report.existing.append(await cloner.store.get(voice_id))
        return
    report.created.append(voice)


async def _remove_old_copies(store: VoiceStore, digests: set[str]) -> list[str]:
    """Delete stored preloads of these clips (SHA-256 hex ``digests``) under the per-checkpoint ids
    of earlier versions; left alone they stay listed beside the current voice, and the API cannot
    delete them (builtin). Returns their ids."""
    old: list[str] = []
    after = None
    while True:  # collect first: deleting while paging would move the cursor's neighbours
        page = await store.list(limit=MAX_LIST_LIMIT, starting_after=after)
        for voice in page.data:
            if voice.builtin and voice.id not in store.builtin_ids and any(
                    voice.id == _old_preload_voice_id(d, voice.model_fingerprint) for d in digests):
                old.append(voice.id)
        if not page.has_more:
            break
        after = page.next_page
    for voice_id in old:
        try:
            await store.delete(voice_id, allow_builtin=True)
        except VoiceNotFoundError:  # a replica starting alongside removed it first
            pass
        logger.info("voice preload: removed %s, a copy under an earlier version's per-checkpoint id", voice_id)
    return old
