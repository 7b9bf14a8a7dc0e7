"""Errors raised by the voices package.

    VoiceStoreError
    ├── VoiceNotFoundError           no voice has this id (or it was deleted)            -> 404
    ├── VoiceExistsError             put() of an id that is already taken               -> 409
    ├── ReadOnlyVoiceError           builtin voices cannot be patched or deleted          -> 403
    ├── InvalidVoiceError            a field value or a list parameter is invalid         -> 400
    │   └── InvalidCursorError       starting_after / ending_before names no voice        -> 400
    ├── VoiceStoreUnavailableError   the backend (Redis, SQLite) cannot be reached; retry -> 503
    ├── VoiceCloningError            encoding or compressing a valid clip failed          -> 500
    ├── VoiceIncompatibleError       another checkpoint's prefix, no codes to redo it     -> 409
    ├── PronunciationDictNotFoundError  no pronunciation dictionary has this id         -> 404
    ├── InvalidPronunciationDictError   a dictionary field, entry or list parameter       -> 400
    │   └── IpaNotSupportedError     an IPA alias (Gepard has no phoneme input)          -> 400
    └── InvalidClipError             the uploaded reference clip cannot be used           -> 400
        ├── ClipTooShortError        shorter than the minimum (3 s)                       -> 400
        ├── ClipSilentError          RMS level below the silence threshold (-60 dBFS)     -> 400
        ├── ClipTooLargeError        more bytes than the upload limit                      -> 400
        ├── UnsupportedAudioFormatError  not wav/flac/ogg/mp3                              -> 400
        └── CorruptClipError         claims a supported format but does not decode        -> 400

Every bad clip is a 400, each with its own ``error_code`` (api/errors.py): Cartesia documents 400
for a bad request (protocol section 7), and the SDKs raise BadRequestError for 400 but only a
generic APIStatusError for 413 or 415.

Third-party errors are translated where they enter (``map_redis_errors()`` in
``voices/backends/redis_store.py``, ``map_sqlite_errors()`` in ``voices/backends/local_store.py``)
and re-raised ``from exc``. Messages carry the failing values (ids, durations, sizes, limits).
"""

from __future__ import annotations


class VoiceStoreError(Exception):
    """Base class of every error the voices package raises on purpose."""

    #: True when the same call may succeed later without any change by the caller.
    retryable: bool = False


class VoiceNotFoundError(VoiceStoreError, KeyError):
    """No voice has this id."""

    def __init__(self, voice_id: str) -> None:
        super().__init__(f"voice {voice_id!r} not found")
        self.voice_id = voice_id

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])


class VoiceExistsError(VoiceStoreError):
    """A voice with this id is already stored."""

    def __init__(self, voice_id: str) -> None:
        super().__init__(f"voice {voice_id!r} already exists")
        self.voice_id = voice_id


class ReadOnlyVoiceError(VoiceStoreError):
    """The voice is builtin: it can be listed and used, not patched or deleted."""

    def __init__(self, voice_id: str, action: str) -> None:
        super().__init__(f"voice {voice_id!r} is a builtin voice and cannot be {action}")
        self.voice_id = voice_id
        self.action = action


class InvalidVoiceError(VoiceStoreError, ValueError):
    """A voice field or a list parameter has an invalid value; the message names it."""


class InvalidCursorError(InvalidVoiceError):
    """A pagination cursor (``starting_after`` / ``ending_before``) is not a known voice id."""

    def __init__(self, parameter: str, voice_id: str) -> None:
        super().__init__(f"{parameter}={voice_id!r} is not the id of a voice in this list")
        self.parameter = parameter
        self.voice_id = voice_id


class VoiceStoreUnavailableError(VoiceStoreError):
    """The storage backend cannot be reached or is busy; retry later."""

    retryable = True


class VoiceCloningError(VoiceStoreError):
    """Encoding the clip or compressing its codes into a speaker prefix failed."""


class VoiceIncompatibleError(VoiceStoreError):
    """The voice's speaker prefix was computed by another checkpoint (``model_fingerprint``), and
    it has no reference codes to recompute it from: it cannot speak on this server until it is
    cloned again. Not the client's fault, and retrying cannot help (see ``voices/recompute.py``)."""

    def __init__(self, voice_id: str, stored_fingerprint: str, model_fingerprint: str,
                 prefix_shape: tuple[int, ...]) -> None:
        made_by = (f"model fingerprint {stored_fingerprint!r}" if stored_fingerprint
                   else "a model that was not recorded (no fingerprint)")
        super().__init__(
            f"voice {voice_id!r}: its speaker prefix {list(prefix_shape)} was computed by {made_by}, but this "
            f"server runs model fingerprint {model_fingerprint!r}, and the voice has no stored reference codes "
            "to recompute the prefix from; clone it again from its clip (POST /voices/clone) and delete this one"
        )
        self.voice_id = voice_id
        self.stored_fingerprint = stored_fingerprint
        self.model_fingerprint = model_fingerprint


class InvalidClipError(VoiceStoreError, ValueError):
    """The reference clip cannot be used for cloning; the message says why."""


class ClipTooShortError(InvalidClipError):
    def __init__(self, duration_s: float, min_seconds: float) -> None:
        super().__init__(
            f"reference clip is {duration_s:.2f} s long; at least {min_seconds:g} s of audio is needed"
        )
        self.duration_s = duration_s
        self.min_seconds = min_seconds


class ClipSilentError(InvalidClipError):
    def __init__(self, level_dbfs: float, threshold_dbfs: float) -> None:
        level = "-inf" if level_dbfs == float("-inf") else f"{level_dbfs:.1f}"
        super().__init__(
            f"reference clip is silent: its RMS level is {level} dBFS, below the "
            f"{threshold_dbfs:g} dBFS threshold"
        )
        self.level_dbfs = level_dbfs
        self.threshold_dbfs = threshold_dbfs


class ClipTooLargeError(InvalidClipError):
    def __init__(self, size_bytes: int, max_bytes: int) -> None:
        super().__init__(
            f"reference clip is {size_bytes} bytes; the limit is {max_bytes} bytes "
            f"({max_bytes / 1e6:g} MB)"
        )
        self.size_bytes = size_bytes
        self.max_bytes = max_bytes


class UnsupportedAudioFormatError(InvalidClipError):
    """The clip is not one of the supported containers (wav, flac, ogg, mp3)."""


class CorruptClipError(InvalidClipError):
    """The clip looks like a supported format but cannot be decoded."""


class PronunciationDictNotFoundError(VoiceStoreError, KeyError):
    """No pronunciation dictionary has this id (on a TTS request: its ``pronunciation_dict_id``)."""

    def __init__(self, dict_id: str) -> None:
        super().__init__(f"pronunciation dictionary {dict_id!r} not found")
        self.dict_id = dict_id

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidPronunciationDictError(VoiceStoreError, ValueError):
    """A dictionary's name, one of its entries or a list parameter is invalid; ``field`` names it."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class IpaNotSupportedError(InvalidPronunciationDictError):
    """An entry's alias is IPA (``<<k|ɑ|ɹ>>``): Gepard reads text only, so it cannot follow it."""

    def __init__(self, index: int, text: str, alias: str) -> None:
        super().__init__(
            f"items[{index}].alias: {alias!r} (for {text!r}) is IPA, which Gepard cannot speak: it has no "
            "phoneme input. Write a sounds-like spelling instead, e.g. {'text': 'Cartesia', 'alias': 'car-TEE-zhuh'}",
            field=f"items[{index}].alias")
        self.index = index
