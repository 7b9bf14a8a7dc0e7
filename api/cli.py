"""The ``gepard`` command: synthesise to a file, serve, or write random checkpoints.

    gepard synth "Hello there." -o out.wav [--voice ref.wav | --voice none] [--language en] [--raw] [--model DIR]
                 [--temperature 0.4] [--cfg-scale 2]
                 (the text as the server reads it: transcript tags, normalisation, one engine request a
                 sentence; --raw: the text as written, in one engine request, as the reference runner)
    gepard serve [--host 127.0.0.1] [--port 8000] [--model DIR] ...
    gepard tiny OUT_DIR [--size tiny|full] [--seed N] [--stop-after N]
    gepard keys add|remove KEY | gepard keys count     (API keys shared through REDIS_URL; remove also
                                                        revokes the key's access tokens)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

import numpy as np

logger = logging.getLogger("gepard.cli")

# api.settings.DTYPES and the logging levels, spelled out: importing api.settings costs seconds, and
# every command (--help too) builds the parser (tests/api/test_cli.py keeps the two lists equal)
DTYPES = ("auto", "float32", "fp32", "bfloat16", "bf16", "float16", "fp16")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class CliError(Exception):
    """A problem main() prints as one line (``gepard COMMAND: error: ...``), exiting 2."""


def _device_arg(value: str) -> str:
    """--device: a device name this machine has (checked before any model loads)."""
    if value in ("auto", "cpu"):  # argparse converts the default too: skip the seconds api.settings costs
        return value
    from api.settings import device_problem

    problem = device_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="checkpoint directory or HF repo id (default: $GEPARD_MODEL or nineninesix/gepard-1.0)")
    p.add_argument("--codec", default=None, help="NanoCodec .nemo file or HF id (default: the checkpoint's codec_id)")
    p.add_argument("--backend", default="torch", choices=["auto", "vllm", "torch"], help="inference backend (synth default: torch)")
    p.add_argument("--device", default="auto", type=_device_arg, help="cpu, cuda, cuda:1 ... (default: GPU when available)")
    p.add_argument("--dtype", default="auto", choices=DTYPES, help="float32, bfloat16 or float16 (default: bf16 on GPUs of compute capability 8.0+, float32 on older GPUs and on CPU)")


def _output_problem(out: Path) -> Optional[str]:
    """Why the WAV cannot be written to ``out``, or None; checked before the model loads, not after
    the whole synthesis."""
    import soundfile as sf

    # soundfile picks the format from the suffix; the audio is written as 16-bit PCM
    if not out.suffix or not sf.check_format(out.suffix[1:].upper(), "PCM_16"):
        return f"-o {out}: the suffix must name a 16-bit PCM audio format (.wav, .flac, ...)"
    if out.is_dir():
        return f"-o {out}: is a directory"
    if not out.parent.is_dir():
        return f"-o {out}: directory {out.parent} does not exist"
    if not os.access(out.parent, os.W_OK | os.X_OK):
        return f"-o {out}: directory {out.parent} is not writable"
    return None


async def _synth(args: argparse.Namespace) -> int:
    import soundfile as sf
    import torch

    from api.runtime import codec_source
    from codec_worker.nanocodec import NanoCodec
    from engine.device import pick_device, pick_dtype
    from engine.factory import EngineOptions, create_engine
    from engine.requests import SamplingParams, SynthesisRequest
    from voices.audio_input import TARGET_RATE_HZ, load_reference_clip

    t0 = time.perf_counter()
    out = Path(args.output)
    problem = _output_problem(out)
    if problem is not None:
        raise CliError(problem)
    if not args.text.strip():  # before the model loads, as the server answers before generating
        raise CliError("the text is empty: there is nothing to synthesise")
    clip, clip_bytes, pcm = None, b"", None
    if args.voice:  # read and decoded now, so a bad clip is refused before the model loads
        clip = Path(args.voice)
        try:
            clip_bytes = clip.read_bytes()
        except OSError as exc:
            raise CliError(f"--voice {clip}: {exc.strerror or exc}") from None
        pcm = load_reference_clip(clip_bytes, filename=clip.name, content_type=None)
    engine = await create_engine(EngineOptions(model=args.model, backend=args.backend, device=args.device, dtype=args.dtype))
    try:
        device = pick_device(args.device)
        model_dir = Path(engine.model_info.name) if Path(engine.model_info.name).is_dir() else None
        codec = NanoCodec.load(codec_source(model_dir, args.codec), device=device, dtype=pick_dtype(device, args.dtype))
        prefix = None  # the default voice: the model's learned null_prefix
        if args.unconditioned:
            prefix = engine.default_prefix()[:0]  # [0, H]: no speaker prefix, the text alone
            logger.info("voice: unconditioned (no speaker prefix)")
        elif clip is not None:
            if codec.sample_rate_hz != TARGET_RATE_HZ:
                pcm = load_reference_clip(clip_bytes, filename=clip.name, content_type=None,
                                          target_rate=codec.sample_rate_hz)
            codes = codec.encode(torch.from_numpy(pcm).unsqueeze(0))[0]  # [32, T]
            prefix = engine.compress_reference(codes.T.cpu())
            logger.info("voice: %s -> %d reference frames -> prefix %s", clip, codes.shape[1], tuple(prefix.shape))
        sampling = SamplingParams(
            temperature=args.temperature, top_k=args.top_k, seed=args.seed, max_frames=args.max_frames,
            cfg_scale=args.cfg_scale, cfg_frames=args.cfg_frames, stop_threshold=args.stop_threshold,
        )
        if args.raw:
            frames = []
            reason = None
            async for chunk in engine.generate(SynthesisRequest(str(uuid.uuid4()), args.text, prefix, sampling)):
                frames.append(chunk.codes)
                reason = chunk.finish_reason
            codes = torch.cat(frames, dim=1)
            audio = codec.decode_codes(codes.unsqueeze(0).to(device))[0].float().cpu().numpy()
            what = f"{codes.shape[1]} frames ({reason.value if reason else '?'})"
        else:
            audio, segments = await _speak(args.text, args.language, engine, codec, device, prefix, sampling)
            what = f"{segments} segment(s)"
    finally:
        await engine.aclose()
    try:
        sf.write(str(out), np.clip(audio, -1.0, 1.0), codec.sample_rate_hz, subtype="PCM_16")
    except (OSError, sf.SoundFileError) as exc:  # e.g. the disk filled up meanwhile
        raise CliError(f"-o {out}: {exc}") from None
    seconds = len(audio) / codec.sample_rate_hz
    print(f"wrote {out}: {what}, {seconds:.2f} s at {codec.sample_rate_hz} Hz in {time.perf_counter() - t0:.1f} s")
    return 0


async def _speak(text: str, language: str, engine, codec, device, prefix, sampling) -> tuple[np.ndarray, int]:
    """``text`` as the server speaks a ``/tts/bytes`` transcript (api.synthesis): transcript tags,
    normalisation in ``language``, one engine request a sentence, breaks as silence; (audio, number
    of segments). CliError for a bad tag, or a text with nothing to say."""
    from api.settings import Settings
    from api.synthesis import SynthesisService
    from api.text.errors import TextError
    from codec_worker.batching import BatchingCodecDecoder
    from codec_worker.schedule import default_schedule
    from voices.backends import LocalVoiceStore

    decoder = BatchingCodecDecoder(codec, schedule=default_schedule(device))
    with tempfile.TemporaryDirectory(prefix="gepard-synth-") as data_dir:
        voices = LocalVoiceStore(data_dir)  # never used: the prefix is given (SynthesisService needs one)
        try:
            service = SynthesisService(engine, decoder, voices, Settings())
            try:
                segments = service.plan(text, language)
            except TextError as exc:
                raise CliError(f"the text: {exc}") from None
            if not segments:
                raise CliError("the text has nothing to say (punctuation or symbols only)")
            pieces: list[np.ndarray] = []
            for k, segment in enumerate(segments):
                async for pcm in service.speak(segment, prefix, sampling, f"synth-{k}"):
                    pieces.append(pcm)
        finally:
            await voices.aclose()
            await decoder.aclose()
    return np.concatenate(pieces), len(segments)


def _tiny(args: argparse.Namespace) -> int:
    from engine.tiny import TinyArgumentError, check_stop_after, write_tiny_checkpoint

    try:
        check_stop_after(args.size, args.stop_after)  # before anything is written
    except TinyArgumentError as exc:
        print(f"gepard tiny: error: {exc}", file=sys.stderr)
        return 2
    try:
        path = write_tiny_checkpoint(Path(args.out), size=args.size, seed=args.seed, stop_after=args.stop_after)
    except OSError as exc:  # e.g. OUT_DIR is a file, or cannot be created
        print(f"gepard tiny: error: cannot write {args.out}: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.size} random Gepard checkpoint and codec to {path}")
    return 0


async def _keys(args: argparse.Namespace) -> int:
    from redis.exceptions import RedisError

    from api.key_store import RedisKeyStore

    url = args.redis_url or os.environ.get("GEPARD_REDIS_URL") or os.environ.get("REDIS_URL")
    if not url:
        print("gepard keys: set REDIS_URL (or --redis-url): keys are kept in the voice store's Redis", file=sys.stderr)
        return 2
    try:
        store = RedisKeyStore.from_url(url)  # ValueError: not a Redis URL
    except ValueError as exc:
        print(f"gepard keys: {exc}", file=sys.stderr)
        return 2
    try:
        if args.action == "add":
            added = await store.add(args.key)
            print("added" if added else "already present")
        elif args.action == "remove":
            print("removed" if await store.remove(args.key) else "not present")
        else:
            print(f"{await store.count()} key(s) stored (as SHA-256 digests)")
    except ValueError as exc:
        print(f"gepard keys: {exc}", file=sys.stderr)
        return 2
    except RedisError as exc:  # unreachable, refused, wrong password: the message names no credential
        print(f"gepard keys: Redis: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    finally:
        await store.aclose()
    return 0


def _serve(args: argparse.Namespace) -> int:
    from api.server import serve

    return serve(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gepard", description="Gepard TTS server speaking the Cartesia protocol")
    parser.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS)
    sub = parser.add_subparsers(dest="command", required=True)

    s = sub.add_parser("synth", help="synthesise text to a WAV file")
    s.add_argument("text")
    s.add_argument("-o", "--output", required=True, help="output .wav path")
    s.add_argument("--voice", help="reference clip to clone (wav/flac/ogg/mp3, any rate; first 15 s used), or 'none' "
                                   "for the unconditioned voice (no speaker prefix; a file named none: ./none); "
                                   "default: the model's default voice (null_prefix)")
    s.add_argument("--unconditioned", action="store_true",
                   help="no speaker prefix at all, as the upstream reference runner without a reference "
                        "(same as --voice none); the speaker then follows the text and --seed")
    s.add_argument("--language", default="en", help="the language the text is read in (normalisation), as a "
                                                    "request's language or locale (default: en)")
    s.add_argument("--raw", action="store_true",
                   help="the text as written, in one engine request, as the upstream reference runner reads it "
                        "(no transcript tags, no normalisation, no sentences)")
    _add_model_args(s)
    s.add_argument("--temperature", type=float, default=0.4)
    s.add_argument("--top-k", type=int, default=0)
    s.add_argument("--seed", type=int, default=None)
    s.add_argument("--max-frames", type=int, default=None)
    s.add_argument("--cfg-scale", type=float, default=1.0)
    s.add_argument("--cfg-frames", type=int, default=None)
    s.add_argument("--stop-threshold", type=float, default=0.5)

    t = sub.add_parser("tiny", help="write a random checkpoint + codec in the published layout")
    t.add_argument("out")
    t.add_argument("--size", choices=["tiny", "full"], default="tiny")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--stop-after", type=int, default=None)

    k = sub.add_parser("keys", help="manage API keys shared through Redis (REDIS_URL); removing a key also revokes "
                                    "the access tokens it minted (within GEPARD_KEY_CACHE_TTL_S on every replica)")
    k.add_argument("action", choices=["add", "remove", "count"])
    k.add_argument("key", nargs="?", default="")
    k.add_argument("--redis-url", default=None)

    v = sub.add_parser("serve", help="serve the Cartesia-compatible API")
    v.add_argument("--host", default=None)
    v.add_argument("--port", type=int, default=None)
    _add_model_args(v)
    v.set_defaults(backend=None)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "synth":
        if args.voice == "none":
            args.voice, args.unconditioned = None, True
        elif args.voice and args.unconditioned:
            parser.error("--unconditioned and a --voice clip exclude each other")
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    from codec_worker.errors import CodecLoadError
    from engine.errors import EngineError
    from voices.errors import InvalidClipError

    try:
        if args.command == "synth":
            return asyncio.run(_synth(args))
        if args.command == "tiny":
            return _tiny(args)
        if args.command == "keys":
            return asyncio.run(_keys(args))
        return _serve(args)
    except (CliError, EngineError, CodecLoadError, InvalidClipError) as exc:  # InvalidClipError: a --voice clip
        print(f"gepard {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
