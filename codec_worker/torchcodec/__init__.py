"""NanoCodec's decoder in plain torch (no NeMo): loads the same .nemo, produces the same audio.

    from codec_worker.torchcodec import load_torch_decoder
    codec = load_torch_decoder("codec.nemo", device="cuda", dtype=torch.bfloat16)

layers.py (convs, activations) -> decoder.py (the network, its config) -> weights.py (checkpoint
keys -> parameters, weight norm folded) -> state.py (each stream's conv tails between chunks) ->
codec.py (the decode API NanoCodec offers, and stateful decodes).
"""

from codec_worker.torchcodec.codec import TorchNanoCodec, load_torch_decoder
from codec_worker.torchcodec.decoder import CausalHiFiGANDecoder, DecoderConfig
from codec_worker.torchcodec.state import ConvStateCache

__all__ = ["CausalHiFiGANDecoder", "ConvStateCache", "DecoderConfig", "TorchNanoCodec", "load_torch_decoder"]
