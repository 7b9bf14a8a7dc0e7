"""The parts of Gepard the vLLM backend keeps in the API process: checks, voices, prompts.

The model itself runs in vLLM's worker process. The API process never loads the full weights; it
reads only what it needs from ``model.safetensors`` with ``safe_open``:

- the checkpoint check: every tensor's name and shape from the file header, against the config
  (the same ``validate_tensors`` the torch backend uses), so a bad checkpoint fails here in
  milliseconds with a CheckpointError instead of deep inside the engine core;
- ``null_prefix`` (the default voice), the voice-cloning compressor (``ref_compressor.*``, run on
  CPU in float32) and the tensors of the weights fingerprint;
- the tokenizer, and request preparation: validation (the same rules and messages as the torch
  backend, plus the vLLM-only limits) and the prompt, built exactly as the torch backend builds it
  (``engine.prompt``), as K prefix rows of embeddings followed by text token ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import torch

from engine.backends.vllm_layout import MAX_REPETITION_WINDOW, FrameParams, TokenLayout
from engine.checkpoint import WEIGHTS_FILE, validate_tensors
from engine.config import BACKBONE_CONFIG_FILE, GepardConfig
from engine.errors import CheckpointError, InvalidRequestError
from engine.model.gepard import weights_fingerprint
from engine.model.ref_compressor import RefCompressor
from engine.prompt import adaptive_max_frames, build_text_ids
from engine.requests import SynthesisRequest, validated_text
from engine.sampling import new_seed
from engine.tokenizer import TextTokenizer

logger = logging.getLogger(__name__)

_FINGERPRINT_EXTRA = "model.layers.0.self_attn.q_proj.weight"


@dataclass(frozen=True)
class PreparedPrompt:
    """A validated request in vLLM's terms (before conversion to vLLM objects).

    prompt_embeds: [P, H] float32; rows [0, K) are the speaker prefix, the rest are zeros (ignored).
    token_ids: [P] vLLM ids (0 for the prefix rows, shifted text ids after); is_token_ids says which.
    """

    request_id: str
    prompt_embeds: torch.Tensor
    token_ids: list[int]
    is_token_ids: list[bool]
    params: FrameParams
    max_frames: int

    @property
    def prompt_len(self) -> int:
        return len(self.token_ids)


def read_header(model_dir: Path, cfg: GepardConfig) -> None:
    """Check ``model.safetensors`` names and shapes against ``cfg`` without reading the weights."""
    from safetensors import SafetensorError, safe_open

    path = model_dir / WEIGHTS_FILE
    if not path.exists():
        raise CheckpointError(f"missing {WEIGHTS_FILE} in {model_dir}")
    try:
        with safe_open(str(path), framework="pt") as f:
            metas = {name: torch.empty(f.get_slice(name).get_shape(), device="meta") for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from None
    validate_tensors(metas, cfg, source=str(path))


def _read_tensors(model_dir: Path, names: list[str]) -> dict[str, torch.Tensor]:
    from safetensors import safe_open

    with safe_open(str(model_dir / WEIGHTS_FILE), framework="pt") as f:
        tensors = {name: f.get_tensor(name) for name in names}
    # published scalars are 0-dim; the model (and the fingerprint) use [1]
    return {name: t.reshape(1) if t.dim() == 0 else t for name, t in tensors.items()}


class GepardFrontend:
    """Tokenizer, default voice, voice compressor and request preparation for one checkpoint."""

    def __init__(self, model_dir: Path, cfg: GepardConfig, tensors: dict[str, torch.Tensor]) -> None:
        self.model_dir = model_dir
        self.config = cfg
        self.tokenizer = TextTokenizer(model_dir)
        self.null_prefix = tensors["null_prefix"].float()  # [K, H]
        self.fingerprint = weights_fingerprint(tensors)
        self.compressor: RefCompressor | None = None
        if cfg.compressor is not None:
            self.compressor = RefCompressor(cfg.compressor, cfg.num_channels)
            prefix = "ref_compressor."
            state = {k[len(prefix):]: v.float() for k, v in tensors.items() if k.startswith(prefix)}
            self.compressor.load_state_dict(state, strict=True)
            self.compressor.eval()
        self.levels = torch.tensor(cfg.audio_heads)
        self.model_info = cfg.model_info(str(model_dir), self.fingerprint)

    @classmethod
    def load(cls, model_dir: Path) -> "GepardFrontend":
        """Check the checkpoint (config + tensor header) and read the API-side tensors."""
        cfg = GepardConfig.from_dir(model_dir)
        backbone_json = model_dir / BACKBONE_CONFIG_FILE
        if not backbone_json.is_file():
            raise CheckpointError(f"missing {BACKBONE_CONFIG_FILE} in {model_dir} (vLLM reads the backbone config from it)")
        read_header(model_dir, cfg)
        names = ["null_prefix", _FINGERPRINT_EXTRA]
        if cfg.compressor is not None:
            from engine.checkpoint import expected_shapes

            names += [n for n in expected_shapes(cfg) if n.startswith("ref_compressor.")]
        return cls(model_dir, cfg, _read_tensors(model_dir, names))

    # -- voices -----------------------------------------------------------------------------------
    def default_prefix(self) -> torch.Tensor:
        return self.null_prefix.clone()

    @torch.no_grad()
    def compress(self, ref_codes: torch.Tensor) -> torch.Tensor:
        """Reference codes [T, 32] -> speaker prefix [K, H] float32 on CPU (as GepardModel.compress)."""
        if self.compressor is None:
            raise InvalidRequestError("this checkpoint has no voice-cloning compressor")
        if ref_codes.dim() != 2 or ref_codes.shape[1] != self.config.num_channels or ref_codes.shape[0] == 0:
            raise InvalidRequestError(
                f"reference codes must have shape [T>0, {self.config.num_channels}], got {list(ref_codes.shape)}")
        if bool(((ref_codes < 0) | (ref_codes >= self.levels)).any()):
            raise InvalidRequestError("reference codes are outside the codec's levels")
        return self.compressor(ref_codes.long().unsqueeze(0))[0].float()

    def check_prefix(self, prefix: torch.Tensor) -> torch.Tensor:
        """A speaker prefix as float32 [K, H] or [0, H] (no prefix: the unconditioned voice), or
        InvalidRequestError (bad prompt embeds kill vLLM's engine)."""
        want = (self.config.prefix_length, self.config.hidden_size)
        if not isinstance(prefix, torch.Tensor):
            raise InvalidRequestError(f"speaker prefix must be a tensor of shape {list(want)}, got {type(prefix).__name__}")
        if prefix.dim() != 2 or tuple(prefix.shape) not in (want, (0, want[1])):
            raise InvalidRequestError(f"speaker prefix must have shape {list(want)}, got {list(prefix.shape)} "
                                      f"([0, {want[1]}] means no prefix)")
        if prefix.dtype == torch.bool or prefix.is_complex():
            raise InvalidRequestError(f"speaker prefix must hold real numbers, got dtype {prefix.dtype}")
        prefix = prefix.detach().to(device="cpu", dtype=torch.float32)
        if not torch.isfinite(prefix).all():
            raise InvalidRequestError("speaker prefix contains NaN or infinite values")
        return prefix

    # -- requests ---------------------------------------------------------------------------------
    def prepare(self, request: SynthesisRequest, layout: TokenLayout, max_model_len: int,
                max_frames_ceiling: int) -> PreparedPrompt:
        """Validate ``request`` and build its prompt; InvalidRequestError names the bad field."""
        cfg, sp = self.config, request.sampling
        text = validated_text(request, max_frames_ceiling)
        if sp.uses_cfg:
            raise InvalidRequestError(
                f"classifier-free guidance (cfg_scale={sp.cfg_scale}) is not supported by the vLLM backend: "
                "it needs a second, unconditional sequence per request; use cfg_scale=1.0 or the torch backend")
        if sp.repetition_penalty != 1.0 and sp.repetition_window > MAX_REPETITION_WINDOW:
            raise InvalidRequestError(
                f"repetition_window must be <= {MAX_REPETITION_WINDOW} on the vLLM backend, got {sp.repetition_window}")
        prefix = self.null_prefix if request.speaker_prefix is None else self.check_prefix(request.speaker_prefix)

        text_ids = build_text_ids(self.tokenizer.encode(text), cfg.special_tokens, cfg.text_repetition)
        k = prefix.shape[0]
        prompt_len = k + len(text_ids)
        room = max_model_len - prompt_len
        if sp.max_frames is not None:
            max_frames = sp.max_frames
            if max_frames > room:
                raise InvalidRequestError(f"prompt ({prompt_len} tokens) + max_frames ({max_frames}) exceeds the "
                                          f"engine's max_model_len ({max_model_len})")
        else:
            max_frames = min(adaptive_max_frames(text, cfg.codec.exact_frame_rate_hz, max_frames_ceiling), room)
            if max_frames < 1:
                raise InvalidRequestError(f"text is too long: its prompt takes {prompt_len} of the engine's "
                                          f"{max_model_len} positions")
        seed = (sp.seed if sp.seed is not None else new_seed()) & ((1 << 63) - 1)
        try:
            params = FrameParams(float(sp.temperature), int(sp.top_k), seed, float(sp.stop_threshold),
                                 float(sp.repetition_penalty), int(sp.repetition_window))
        except ValueError as exc:
            raise InvalidRequestError(str(exc)) from None

        embeds = torch.zeros(prompt_len, cfg.hidden_size, dtype=torch.float32)
        embeds[:k] = prefix
        return PreparedPrompt(
            request_id=request.request_id,
            prompt_embeds=embeds,
            token_ids=[0] * k + layout.text_ids(text_ids),
            is_token_ids=[False] * k + [True] * len(text_ids),
            params=params,
            max_frames=max_frames,
        )
