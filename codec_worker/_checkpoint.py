"""Reading a NanoCodec checkpoint: find it, parse its config, build the NeMo modules, load tensors.

    checkpoint = read_source(".../codec.nemo")           # or a directory, or a HF repo id
    config = CodecConfig.from_mapping(checkpoint.config, checkpoint.origin)
    modules = build_modules(config)                      # audio_encoder, audio_decoder, vector_quantizer
    load_section(modules["audio_decoder"], "audio_decoder", checkpoint.state_dict, checkpoint.origin)

Every failure is a CodecLoadError whose message names the file, key or tensor at fault.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import io
import json
import math
import os
import re
import tarfile
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import torch
import yaml

from codec_worker import fsq
from codec_worker.errors import CodecFormatError, CodecLoadError, CodecNotFoundError

NEMO_MODULES = "nemo.collections.tts.modules.audio_codec_modules"
CONFIG_NAME = "model_config.yaml"
WEIGHTS_NAME = "model_weights.ckpt"
DEFAULT_HF_REPO = "nvidia/nemo-nano-codec-22khz-1.89kbps-21.5fps"

# Which classes each section may name. The decoder must be causal: streaming decode relies on it.
ALLOWED_TARGETS: dict[str, frozenset[str]] = {
    "audio_encoder": frozenset({"HiFiGANEncoder", "CausalHiFiGANEncoder"}),
    "audio_decoder": frozenset({"CausalHiFiGANDecoder"}),
    "vector_quantizer": frozenset({"GroupFiniteScalarQuantizer"}),
}
SECTIONS = tuple(ALLOWED_TARGETS)
SUPPORTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

_HF_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


# --------------------------------------------------------------------------------------------
# Config


@dataclass(frozen=True, slots=True)
class CodecConfig:
    """The parts of ``model_config.yaml`` that inference uses (sections keep their ``_target_``)."""

    sample_rate_hz: int
    samples_per_frame: int
    audio_encoder: Mapping[str, Any]
    audio_decoder: Mapping[str, Any]
    vector_quantizer: Mapping[str, Any]
    origin: str = "<config>"  # where the config came from, for messages (not part of the identity)

    @classmethod
    def from_mapping(cls, raw: Any, origin: str) -> CodecConfig:
        """Validate a parsed ``model_config.yaml``; raise CodecFormatError naming the bad key."""
        if not isinstance(raw, Mapping):
            raise CodecFormatError(f"{origin}: {CONFIG_NAME} is not a mapping (got {type(raw).__name__})")
        for key in ("sample_rate", "samples_per_frame", *SECTIONS):
            if key not in raw:
                raise CodecFormatError(f"{origin}: {CONFIG_NAME} has no '{key}' key")
        for key in ("sample_rate", "samples_per_frame"):
            if not isinstance(raw[key], int) or raw[key] <= 0:
                raise CodecFormatError(f"{origin}: {CONFIG_NAME} '{key}' must be a positive int, got {raw[key]!r}")
        for section in SECTIONS:
            if not isinstance(raw[section], Mapping) or "_target_" not in raw[section]:
                raise CodecFormatError(f"{origin}: {CONFIG_NAME} '{section}' must be a mapping with a _target_")
        config = cls(
            sample_rate_hz=raw["sample_rate"],
            samples_per_frame=raw["samples_per_frame"],
            audio_encoder=dict(raw["audio_encoder"]),
            audio_decoder=dict(raw["audio_decoder"]),
            vector_quantizer=dict(raw["vector_quantizer"]),
            origin=origin,
        )
        config._check(origin)
        return config

    def _check(self, origin: str) -> None:
        for section, rates_key in (("audio_encoder", "down_sample_rates"), ("audio_decoder", "up_sample_rates")):
            rates = self.section(section).get(rates_key)
            if rates is None:
                rates = class_default(section, self.section(section), rates_key, origin)
            if math.prod(rates) != self.samples_per_frame:
                raise CodecFormatError(
                    f"{origin}: {section}.{rates_key} {list(rates)} multiply to {math.prod(rates)}, "
                    f"expected samples_per_frame {self.samples_per_frame}"
                )
        quantizer = self.vector_quantizer
        groups, levels = quantizer.get("num_groups"), quantizer.get("num_levels_per_group")
        if groups != fsq.NUM_GROUPS or list(levels or ()) != list(fsq.FSQ_LEVELS):
            raise CodecFormatError(
                f"{origin}: vector_quantizer has num_groups={groups}, num_levels_per_group={levels}; "
                f"only {fsq.NUM_GROUPS} groups of {list(fsq.FSQ_LEVELS)} (32 channels) are supported"
            )
        input_dim = self.audio_decoder.get("input_dim")
        if input_dim != fsq.NUM_CHANNELS:
            raise CodecFormatError(f"{origin}: audio_decoder.input_dim is {input_dim}, expected {fsq.NUM_CHANNELS}")

    def section(self, name: str) -> Mapping[str, Any]:
        return getattr(self, name)

    def to_json(self) -> str:
        """Canonical JSON of everything that shapes inference (used in the fingerprint)."""
        return json.dumps(
            {
                "sample_rate": self.sample_rate_hz,
                "samples_per_frame": self.samples_per_frame,
                **{name: dict(self.section(name)) for name in SECTIONS},
            },
            sort_keys=True,
        )


def _nemo_class(section: str, target: Any, origin: str) -> type:
    module_path, _, class_name = str(target).rpartition(".")
    if module_path != NEMO_MODULES or class_name not in ALLOWED_TARGETS[section]:
        allowed = ", ".join(f"{NEMO_MODULES}.{name}" for name in sorted(ALLOWED_TARGETS[section]))
        raise CodecFormatError(f"{origin}: {section}._target_ {target!r} is not supported; expected one of: {allowed}")
    try:
        module = importlib.import_module(NEMO_MODULES)
    except ImportError as exc:
        raise CodecLoadError(f"building the codec needs nemo_toolkit ({NEMO_MODULES}): {exc}") from exc
    return getattr(module, class_name)


def class_default(section: str, cfg: Mapping[str, Any], key: str, origin: str = "<config>") -> Any:
    """The default of constructor argument ``key`` of the section's NeMo class."""
    parameter = inspect.signature(_nemo_class(section, cfg["_target_"], origin)).parameters.get(key)
    if parameter is None or parameter.default is inspect.Parameter.empty:
        raise CodecFormatError(f"{origin}: {section} has no '{key}' and its class has no default for it")
    return parameter.default


def build_modules(config: CodecConfig, sections: tuple[str, ...] = SECTIONS) -> dict[str, torch.nn.Module]:
    """Instantiate the NeMo modules of ``sections`` (default: encoder, decoder, quantizer).

    Random init, weight norm still parametrized (so state-dict keys match the checkpoint).
    """
    modules: dict[str, torch.nn.Module] = {}
    for section in sections:
        cfg = config.section(section)
        cls = _nemo_class(section, cfg["_target_"], config.origin)
        kwargs = {key: value for key, value in cfg.items() if key != "_target_"}
        try:
            with warnings.catch_warnings():
                # NeMo's CausalConv1dNorm warns about its own torch.tensor(tensor) call
                warnings.simplefilter("ignore", UserWarning)
                modules[section] = cls(**kwargs)
        except (TypeError, ValueError, AssertionError) as exc:
            raise CodecFormatError(f"{config.origin}: cannot build {section} ({cls.__name__}) from the config: {exc}") from exc
    return modules


# --------------------------------------------------------------------------------------------
# Checkpoint reading


@dataclass(slots=True)
class Checkpoint:
    """A checkpoint as read, before any validation against the architecture."""

    config: Any  # parsed model_config.yaml
    state_dict: Mapping[str, Any]
    origin: str  # where it came from, for messages


def _parse_config(text: bytes, origin: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CodecFormatError(f"{origin}: {CONFIG_NAME} is not valid YAML: {exc}") from exc


def _parse_weights(data: bytes | Path, origin: str) -> Mapping[str, Any]:
    source: Any = io.BytesIO(data) if isinstance(data, bytes) else data
    try:
        state = torch.load(source, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many kinds (pickle, zip, runtime) for a bad file
        raise CodecFormatError(f"{origin}: cannot read {WEIGHTS_NAME}: {exc}") from exc
    if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
        state = state["state_dict"]
    if not isinstance(state, Mapping):
        raise CodecFormatError(f"{origin}: {WEIGHTS_NAME} is not a state dict (got {type(state).__name__})")
    return state


def _read_nemo(path: Path) -> Checkpoint:
    origin = str(path)
    try:
        archive = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        raise CodecFormatError(f"{origin} is not a .nemo archive (a tar file): {exc}") from exc
    with archive:
        members = {m.name.removeprefix("./"): m for m in archive.getmembers() if m.isfile()}
        blobs: dict[str, bytes] = {}
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            member = members.get(name)
            if member is None:
                raise CodecFormatError(f"{origin} has no {name} (archive holds: {sorted(members) or 'nothing'})")
            handle = archive.extractfile(member)
            if handle is None:
                raise CodecFormatError(f"{origin}: cannot read {name} from the archive")
            blobs[name] = handle.read()
    return Checkpoint(
        config=_parse_config(blobs[CONFIG_NAME], origin),
        state_dict=_parse_weights(blobs[WEIGHTS_NAME], origin),
        origin=origin,
    )


def _read_directory(path: Path) -> Checkpoint:
    config_path, weights_path = path / CONFIG_NAME, path / WEIGHTS_NAME
    if config_path.is_file() and weights_path.is_file():
        origin = str(path)
        return Checkpoint(
            config=_parse_config(config_path.read_bytes(), origin),
            state_dict=_parse_weights(weights_path, origin),
            origin=origin,
        )
    nemo_files = sorted(path.glob("*.nemo"))
    if len(nemo_files) == 1:
        return _read_nemo(nemo_files[0])
    found = ", ".join(p.name for p in nemo_files) if nemo_files else "none"
    raise CodecNotFoundError(
        f"codec directory {path} holds neither {CONFIG_NAME} + {WEIGHTS_NAME} nor exactly one .nemo file "
        f"(.nemo files: {found})"
    )


def _resolve_hf(repo_id: str) -> Path:
    """Find the repo's .nemo in the local Hugging Face cache, else download it."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - huggingface_hub is a declared dependency
        raise CodecNotFoundError(f"codec '{repo_id}' is not a local path and huggingface_hub is missing") from exc
    hint = f"download it and set GEPARD_CODEC to a local .nemo file (codec '{repo_id}' is not a local path)"
    snapshot: str | None = None
    try:
        snapshot = snapshot_download(repo_id, allow_patterns=["*.nemo"], local_files_only=True)
    except Exception:  # not cached: fall through to a download
        snapshot = None
    if snapshot is None or not list(Path(snapshot).glob("*.nemo")):
        try:
            snapshot = snapshot_download(repo_id, allow_patterns=["*.nemo"])
        except Exception as exc:  # offline, unknown repo, network or auth failure
            raise CodecNotFoundError(
                f"cannot fetch codec '{repo_id}' from the Hugging Face Hub ({type(exc).__name__}: {exc}); {hint}"
            ) from exc
    nemo_files = sorted(Path(snapshot).glob("*.nemo"))
    if len(nemo_files) != 1:
        raise CodecNotFoundError(f"Hugging Face repo '{repo_id}' holds {len(nemo_files)} .nemo files, expected 1; {hint}")
    return nemo_files[0]


def read_source(source: str | Path) -> Checkpoint:
    """Read a ``.nemo`` file, a directory (config + weights, or exactly one .nemo) or a HF repo id."""
    path = Path(source).expanduser()
    if path.is_file():
        return _read_nemo(path)
    if path.is_dir():
        return _read_directory(path)
    if isinstance(source, str) and _HF_REPO_ID.match(source):
        return _read_nemo(_resolve_hf(source))
    raise CodecNotFoundError(f"codec path {path} does not exist (set GEPARD_CODEC to a local .nemo file)")


def load_section(module: torch.nn.Module, prefix: str, state_dict: Mapping[str, Any], origin: str) -> None:
    """Load ``prefix.*`` tensors into ``module`` strictly; name the first bad tensor in the error."""
    expected = module.state_dict()
    head = prefix + "."
    provided = {key[len(head) :]: value for key, value in state_dict.items() if key.startswith(head)}
    missing = [key for key in expected if key not in provided]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise CodecFormatError(f"{origin}: missing tensor '{head}{missing[0]}'{more}")
    unexpected = sorted(key for key in provided if key not in expected)
    if unexpected:
        more = f" (and {len(unexpected) - 1} more)" if len(unexpected) > 1 else ""
        raise CodecFormatError(f"{origin}: unexpected tensor '{head}{unexpected[0]}'{more} for this config")
    for key, reference in expected.items():
        tensor = provided[key]
        if not isinstance(tensor, torch.Tensor):
            raise CodecFormatError(f"{origin}: '{head}{key}' is a {type(tensor).__name__}, not a tensor")
        if tensor.shape != reference.shape:
            raise CodecFormatError(
                f"{origin}: tensor '{head}{key}' has shape {tuple(tensor.shape)}, expected {tuple(reference.shape)}"
            )
        if tensor.is_floating_point() != reference.is_floating_point():
            raise CodecFormatError(f"{origin}: tensor '{head}{key}' has dtype {tensor.dtype}, expected {reference.dtype}")
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CodecFormatError(f"{origin}: tensor '{head}{key}' holds NaN or infinite values")
    module.load_state_dict(provided, strict=True)


def fold_weight_norm(module: torch.nn.Module) -> None:
    """Replace each weight-norm parametrization by the plain weight it computes."""
    from torch.nn.utils import parametrize

    for child in module.modules():
        if parametrize.is_parametrized(child, "weight"):
            parametrize.remove_parametrizations(child, "weight", leave_parametrized=True)


def fingerprint(config: CodecConfig, state_dict: Mapping[str, Any]) -> str:
    """SHA-256 hex over the inference config and every encoder/decoder/quantizer tensor as stored."""
    digest = hashlib.sha256(config.to_json().encode())
    for key in sorted(key for key in state_dict if key.split(".", 1)[0] in SECTIONS):
        tensor = state_dict[key].detach().cpu().contiguous()
        digest.update(f"{key}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def check_quantizer_buffers(quantizer: torch.nn.Module, origin: str) -> None:
    """The stored FSQ levels must be the ones codec_worker.fsq assumes."""
    expected = torch.tensor(fsq.FSQ_LEVELS, dtype=torch.int32)
    for index, group in enumerate(quantizer.fsqs):
        levels = group.num_levels.reshape(-1).cpu().to(torch.int32)
        if not torch.equal(levels, expected):
            raise CodecFormatError(
                f"{origin}: vector_quantizer.fsqs.{index}.num_levels is {levels.tolist()}, expected {list(fsq.FSQ_LEVELS)}"
            )


def write_nemo_archive(path: Path | str, config: Mapping[str, Any], state: Mapping[str, torch.Tensor]) -> Path:
    """Write a ``.nemo`` file (a tar of ``CONFIG_NAME`` and ``WEIGHTS_NAME``) to ``path`` atomically:
    it is built beside ``path`` and renamed into place, so a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        folder = Path(tmp) / "nemo"
        folder.mkdir()
        (folder / CONFIG_NAME).write_text(yaml.safe_dump(dict(config), sort_keys=False))
        torch.save(dict(state), folder / WEIGHTS_NAME)
        partial = Path(tmp) / "codec.nemo"
        with tarfile.open(partial, "w:") as archive:
            archive.add(folder, arcname=".")
        os.replace(partial, path)
    return path
