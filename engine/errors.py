"""Errors raised by the engine package.

    EngineError
    ├── CheckpointError        the checkpoint directory or repo id cannot be used (names the file/tensor)
    ├── InvalidRequestError    this request cannot be served as given (empty text, bad prefix shape...)
    ├── OverloadedError        the engine is at capacity; retry later
    ├── DeviceMemoryError      the device has too little free memory for the engine as configured (at start)
    ├── GenerationError        generation of this one request failed; other requests are unaffected
    └── EngineDeadError        the engine cannot serve anything any more (health goes red)
"""

from __future__ import annotations


class EngineError(Exception):
    """Base class of every error the engine raises on purpose."""


class CheckpointError(EngineError):
    """The checkpoint is missing, unreadable or not in the published Gepard layout."""


class InvalidRequestError(EngineError):
    """The request is invalid; the message says which field and why."""


class OverloadedError(EngineError):
    """The engine has no capacity for another request right now."""


class DeviceMemoryError(EngineError):
    """The device has too little free memory for what the engine was configured to hold; said at
    start, before allocating, with how much would fit."""


class GenerationError(EngineError):
    """Generation of one request failed."""


class EngineDeadError(EngineError):
    """The engine stopped working and must be restarted."""
