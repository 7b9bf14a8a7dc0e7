"""Prompt layout (spec 2.1) and the default frame cap.

    inputs = [ speaker prefix (K rows) | embed(text_ids) ]        then one frame embedding per step
    text_ids = [SOT t... EOT] * (R - 1) + [SOT t... EOT SOS]

R repeats short texts so the model sees about ``target_text_tokens`` tokens of text: with n text
tokens, R = 1 when repetition is disabled or n >= apply_below (13) or n >= target (16), otherwise
R = clamp(ceil(target / n), 1, max_repeats). The first frame is sampled at the SOS position.
"""

from __future__ import annotations

import math

from engine.config import SpecialTokens, TextRepetitionConfig
from engine.errors import InvalidRequestError
from engine.requests import CfgUncondMode


def repetition_count(n: int, cfg: TextRepetitionConfig) -> int:
    if not cfg.enabled or n <= 0 or n >= cfg.apply_below or n >= cfg.target_text_tokens:
        return 1
    return max(1, min(math.ceil(cfg.target_text_tokens / n), cfg.max_repeats))


def build_text_ids(text_ids: list[int], special: SpecialTokens, repetition: TextRepetitionConfig) -> list[int]:
    """Token ids of the text part of the prompt, ending with SOS."""
    if not text_ids:
        raise InvalidRequestError("text is empty: Gepard cannot synthesise an empty transcript")
    copies = repetition_count(len(text_ids), repetition)
    block = [special.start_of_text, *text_ids, special.end_of_text]
    return block * copies + [special.start_of_speech]


def uncond_text_ids(special: SpecialTokens, mode: CfgUncondMode) -> list[int]:
    """The CFG unconditional branch's text part: the same prefix with the text removed (spec 4.3)."""
    if mode is CfgUncondMode.AUDIO_ONLY:
        return [special.start_of_speech]
    return [special.start_of_text, special.end_of_text, special.start_of_speech]


def adaptive_max_frames(text: str, frame_rate_hz: float, ceiling: int = 2000, factor: float = 4.0, floor: int = 80) -> int:
    """Frame cap from the text length, so a stop head that never fires cannot run away.

    Expected duration follows the upstream DPO heuristic (0.7 s + 0.4 s per word); the cap allows
    ``factor`` times that, at least ``floor`` frames (~3.7 s) and at most ``ceiling`` (~93 s).
    """
    words = max(1, len(text.split()))
    expected_frames = (0.7 + 0.4 * words) * frame_rate_hz
    return int(min(ceiling, max(floor, math.ceil(factor * expected_frames))))
