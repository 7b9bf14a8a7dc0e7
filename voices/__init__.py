"""Voice records and cloning; no HTTP. See ``voices/store.py`` for the store API.

Concrete stores live in ``voices.backends`` (``RedisVoiceStore``, ``LocalVoiceStore``,
``open_voice_store``), so importing this package does not pull in redis or sqlite.
"""

from voices.audio_input import SILENCE_THRESHOLD_DBFS, SUPPORTED_FORMATS, load_reference_clip
from voices.cloning import ClipLimits, VoiceCloner
from voices.errors import (
    ClipSilentError,
    ClipTooLargeError,
    ClipTooShortError,
    CorruptClipError,
    InvalidClipError,
    InvalidCursorError,
    InvalidVoiceError,
    ReadOnlyVoiceError,
    UnsupportedAudioFormatError,
    VoiceCloningError,
    VoiceExistsError,
    VoiceIncompatibleError,
    VoiceNotFoundError,
    VoiceStoreError,
    VoiceStoreUnavailableError,
)
from voices.listing import MAX_LIST_LIMIT, VoiceFilter, VoicePage
from voices.models import PATCHABLE_FIELDS, Locale, Voice, VoicePrompt, VoiceRecord, new_voice_id
from voices.preload import PreloadReport, preload_voice_id, preload_voices
from voices.recompute import PrefixRecomputer
from voices.store import VoiceStore

__all__ = [
    "MAX_LIST_LIMIT",
    "PATCHABLE_FIELDS",
    "SILENCE_THRESHOLD_DBFS",
    "SUPPORTED_FORMATS",
    "ClipLimits",
    "ClipSilentError",
    "ClipTooLargeError",
    "ClipTooShortError",
    "CorruptClipError",
    "InvalidClipError",
    "InvalidCursorError",
    "InvalidVoiceError",
    "Locale",
    "PrefixRecomputer",
    "PreloadReport",
    "ReadOnlyVoiceError",
    "UnsupportedAudioFormatError",
    "Voice",
    "VoiceCloner",
    "VoiceCloningError",
    "VoiceExistsError",
    "VoiceFilter",
    "VoiceIncompatibleError",
    "VoiceNotFoundError",
    "VoicePage",
    "VoicePrompt",
    "VoiceRecord",
    "VoiceStore",
    "VoiceStoreError",
    "VoiceStoreUnavailableError",
    "load_reference_clip",
    "new_voice_id",
    "preload_voice_id",
    "preload_voices",
]
