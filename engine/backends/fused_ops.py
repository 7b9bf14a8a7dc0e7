"""The fast path's element-wise work as Triton kernels (``GEPARD_TORCH_FUSED_KERNELS``).

Eager, a decoder layer of a decode step launches about 73 kernels in bf16 (55 in float32, where the
casts are no-ops), of which only 4 are matrix products and one is attention: a zero-centred RMSNorm
is ten (casts, the square, the mean, + eps, rsqrt, two products, 1 + w, the cast back), a rotary
embedding eight, the attention gate three and SwiGLU's activation two. Fourteen layers of that are
most of the ~1,300 kernels a full-size step launches, and on a GPU a batch-1 step is bound by those
launches, not by memory (replayed as a CUDA graph they still run one after another, ~2 us each).
Here each of them is one kernel that reads its inputs once, computes in float32 and writes once:

    rms_norm(x, weight, eps)                  y = x * rsqrt(mean(x^2) + eps) * (1 + w), by rows
    add_rms_norm(x, h, weight, eps)           (s, rms_norm(s)) for s = x + h
    norm_rope(x, weight, eps, cos, sin)       per-head RMSNorm, then rotate-half rotary:
                                              x [B, T, heads, hd] (a strided view) -> [B, heads, T, hd]
    sigmoid_gate(out, gate)                   out * sigmoid(gate), gate a strided [B, T, heads, hd] view
    silu_mul(gate_up)                         silu(gate) * up for gate_up = [gate | up] by rows

Each rounds where the eager ops round (the norm's output to the model's dtype before the rotary
reads it, the sigmoid and the SiLU before their products), so in bf16 it differs from them only
by the order of a reduction's sums and the fused multiply-adds; in float32 by about one ulp.

The kernels run where Triton runs: CUDA. Under Triton's interpreter (``TRITON_INTERPRET=1`` set
before this module is imported) they run on CPU tensors too, slowly: that is how the CPU tests
check their arithmetic against the eager ops.
"""

from __future__ import annotations

import contextlib

import torch

from codec_worker.triton_support import interpreted, tl, triton, unavailable_reason

FLAT_BLOCK = 1024  # values per program of the flat (element-wise) kernels

if triton is not None:

    # Sizes and strides are not specialised (Triton would compile a variant per value 1 and per
    # divisibility by 16 of each): one compiled kernel per dtype and block, made before any CUDA
    # graph capture by the fast path's check (and by the warm-up run before each capture).

    @triton.jit
    def _add(a, b):
        return a + b

    # tl.reduce with our own combine rather than tl.sum (which is the same reduction): tl.sum is a
    # jit function of Triton's standard library, which the interpreter only runs when TRITON_INTERPRET
    # was set before Triton itself was imported, and the tests switch it on for this module alone

    @triton.jit(do_not_specialize=["cols", "eps"])
    def _rms_norm(x_ptr, h_ptr, w_ptr, sum_ptr, out_ptr, cols, eps, ADD: tl.constexpr, BLOCK: tl.constexpr):
        # one program per row of a contiguous [rows, cols]
        row = tl.program_id(0).to(tl.int64) * cols
        offsets = tl.arange(0, BLOCK)
        inside = offsets < cols
        x = tl.load(x_ptr + row + offsets, mask=inside, other=0.0)
        if ADD:  # the residual sum, rounded to the model's dtype as the eager add rounds it
            x = (x.to(tl.float32) + tl.load(h_ptr + row + offsets, mask=inside, other=0.0).to(tl.float32)).to(x.dtype)
            tl.store(sum_ptr + row + offsets, x, mask=inside)
        xf = x.to(tl.float32)
        scale = tl.rsqrt(tl.reduce(xf * xf, 0, _add) / cols + eps)
        gain = 1.0 + tl.load(w_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + row + offsets, (xf * scale * gain).to(out_ptr.dtype.element_ty), mask=inside)

    @triton.jit(do_not_specialize=["heads", "tokens", "token_stride", "head_stride", "head_dim", "rot", "eps"])
    def _norm_rope(x_ptr, w_ptr, cos_ptr, sin_ptr, out_ptr, heads, tokens, token_stride, head_stride, head_dim, rot,
                   eps, BLOCK: tl.constexpr):
        # one program per (row, token, head); x's element (token n, head h, d) is at
        # n * token_stride + h * head_stride + d, cos/sin are [rows * tokens, rot], out [rows, heads, tokens, hd]
        program = tl.program_id(0).to(tl.int64)
        head = program % heads
        token = program // heads  # row * tokens + t
        base = token * token_stride + head * head_stride
        d = tl.arange(0, BLOCK)
        inside = d < head_dim
        x = tl.load(x_ptr + base + d, mask=inside, other=0.0).to(tl.float32)
        scale = tl.rsqrt(tl.reduce(x * x, 0, _add) / head_dim + eps)
        dtype = out_ptr.dtype.element_ty
        # the norm's output as the eager norm hands it to the rotary: rounded to the model's dtype
        normed = (x * scale * (1.0 + tl.load(w_ptr + d, mask=inside, other=0.0).to(tl.float32))).to(dtype).to(tl.float32)
        half = rot // 2
        rotating = d < rot
        partner = tl.where(d < half, d + half, d - half)  # rotate-half: the other half's element
        xp = tl.load(x_ptr + base + partner, mask=rotating, other=0.0).to(tl.float32)
        wp = tl.load(w_ptr + partner, mask=rotating, other=0.0).to(tl.float32)
        other = (xp * scale * (1.0 + wp)).to(dtype).to(tl.float32)
        other = tl.where(d < half, -other, other)
        cos = tl.load(cos_ptr + token * rot + d, mask=rotating, other=1.0)
        sin = tl.load(sin_ptr + token * rot + d, mask=rotating, other=0.0)
        y = tl.where(rotating, normed * cos + other * sin, normed)
        row = token // tokens
        t = token % tokens
        tl.store(out_ptr + ((row * heads + head) * tokens + t) * head_dim + d, y.to(dtype), mask=inside)

    @triton.jit(do_not_specialize=["numel", "width", "head_dim", "token_stride", "head_stride"])
    def _sigmoid_gate(out_ptr, gate_ptr, y_ptr, numel, width, head_dim, token_stride, head_stride,
                      BLOCK: tl.constexpr):
        # flat over a contiguous [tokens, width = heads * hd]; the gate's (token, head, d) is strided
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < numel
        token = offsets // width
        column = offsets % width
        at = token * token_stride + (column // head_dim) * head_stride + column % head_dim
        dtype = y_ptr.dtype.element_ty
        gate = tl.load(gate_ptr + at, mask=inside, other=0.0).to(tl.float32)
        weight = (1.0 / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)  # eager rounds the sigmoid first
        out = tl.load(out_ptr + offsets, mask=inside, other=0.0).to(tl.float32)
        tl.store(y_ptr + offsets, (out * weight).to(dtype), mask=inside)

    @triton.jit(do_not_specialize=["numel", "width"])
    def _silu_mul(gate_up_ptr, y_ptr, numel, width, BLOCK: tl.constexpr):
        # flat over y [tokens, width]; gate_up is a contiguous [tokens, 2 * width] = [gate | up]
        offsets = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        inside = offsets < numel
        at = (offsets // width) * 2 * width + offsets % width
        dtype = y_ptr.dtype.element_ty
        gate = tl.load(gate_up_ptr + at, mask=inside, other=0.0).to(tl.float32)
        up = tl.load(gate_up_ptr + at + width, mask=inside, other=0.0).to(tl.float32)
        act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)  # eager rounds the SiLU first
        tl.store(y_ptr + offsets, (act * up).to(dtype), mask=inside)


def _on_device(x: torch.Tensor):
    """Triton launches on the calling thread's current device, not the tensors'."""
    reason = unavailable_reason(x.device)
    if reason:
        raise RuntimeError(f"the fused kernels cannot run here: {reason}")
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()


def _token_stride(x: torch.Tensor) -> int:
    """The distance between consecutive tokens of x [B, T, ...] taken as B * T tokens; raises when
    the rows' tokens are not evenly spaced (a view the kernels cannot walk as one sequence)."""
    b, t = x.shape[:2]
    if t == 1:
        return x.stride(0)  # a dim of size 1 has an arbitrary stride
    if b > 1 and x.stride(0) != t * x.stride(1):
        raise ValueError(f"the tokens of a {tuple(x.shape)} view with strides {x.stride()} are not evenly spaced")
    return x.stride(1)


def _row_block(cols: int) -> int:
    return triton.next_power_of_2(max(cols, 1))


def _check_norm(x: torch.Tensor, weight: torch.Tensor) -> None:
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"a norm over {x.shape[-1]} values got weights of shape {tuple(weight.shape)}")


def _launch_norm(x: torch.Tensor, h, weight: torch.Tensor, eps: float, total: torch.Tensor, out: torch.Tensor) -> None:
    cols = x.shape[-1]
    rows = x.numel() // cols if cols else 0
    if rows:
        with _on_device(x):
            _rms_norm[(rows,)](x, x if h is None else h, weight.contiguous(), total, out, cols, eps,
                               ADD=h is not None, BLOCK=_row_block(cols))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Zero-centred RMSNorm over the last dim (engine.model.backbone.ZeroCenteredRMSNorm) as one
    kernel: the output is contiguous, x's dtype."""
    _check_norm(x, weight)
    x = x.contiguous()
    out = torch.empty_like(x)
    _launch_norm(x, None, weight, eps, out, out)
    return out


def add_rms_norm(x: torch.Tensor, h: torch.Tensor, weight: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The residual sum ``s = x + h`` and ``rms_norm(s)``, as one kernel (a decoder layer's second
    norm follows its attention's residual add)."""
    _check_norm(x, weight)
    if h.shape != x.shape:
        raise ValueError(f"cannot add {tuple(h.shape)} to {tuple(x.shape)}")
    x, h = x.contiguous(), h.contiguous()
    total, out = torch.empty_like(x), torch.empty_like(x)
    _launch_norm(x, h, weight, eps, total, out)
    return total, out


def norm_rope(x: torch.Tensor, weight: torch.Tensor, eps: float, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Per-head zero-centred RMSNorm then rotate-half rotary (GatedAttention's q_norm/k_norm and
    RotaryEmbedding.apply) as one kernel.

    x [B, T, heads, hd] may be a strided view (a head's values contiguous, as the slices of a
    fused projection's output are); cos/sin [B, T, rot] float32 with rot <= hd and even. Returns
    [B, heads, T, hd], contiguous, x's dtype: the layout the eager rotary returns."""
    if x.dim() != 4 or x.stride(-1) != 1:
        raise ValueError(f"expected x [B, T, heads, hd] with each head's values contiguous, got shape "
                         f"{tuple(x.shape)} strides {x.stride()}")
    b, t, heads, head_dim = x.shape
    token_stride = _token_stride(x)
    _check_norm(x, weight)
    rot = cos.shape[-1]
    if cos.shape != (b, t, rot) or sin.shape != cos.shape or rot > head_dim or rot % 2:
        raise ValueError(f"expected cos/sin [{b}, {t}, rot] with an even rot <= {head_dim}, got "
                         f"{tuple(cos.shape)} and {tuple(sin.shape)}")
    out = torch.empty((b, heads, t, head_dim), dtype=x.dtype, device=x.device)
    if out.numel():
        with _on_device(x):
            _norm_rope[(b * t * heads,)](x, weight.contiguous(), cos.float().contiguous(), sin.float().contiguous(), out,
                                         heads, t, token_stride, x.stride(2), head_dim, rot, eps,
                                         BLOCK=_row_block(head_dim))
    return out


def sigmoid_gate(out: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    """``out * sigmoid(gate)`` as one kernel: gate [B, T, heads, hd], a view whose heads' values
    are contiguous (the gate half of the attention's query projection), out B * T tokens of
    heads * hd values (made contiguous). Returns [B * T, heads * hd]."""
    if gate.dim() != 4 or gate.stride(-1) != 1:
        raise ValueError(f"expected a gate [B, T, heads, hd] with each head's values contiguous, got shape "
                         f"{tuple(gate.shape)} strides {gate.stride()}")
    heads, head_dim = gate.shape[-2:]
    tokens = gate.shape[0] * gate.shape[1]
    token_stride = _token_stride(gate)
    if out.numel() != gate.numel():
        raise ValueError(f"cannot gate {tuple(out.shape)} with {tuple(gate.shape)}")
    out = out.reshape(tokens, heads * head_dim).contiguous()
    y = torch.empty_like(out)
    numel = y.numel()
    if numel:
        with _on_device(out):
            _sigmoid_gate[(triton.cdiv(numel, FLAT_BLOCK),)](out, gate, y, numel, heads * head_dim, head_dim, token_stride,
                                                             gate.stride(-2), BLOCK=FLAT_BLOCK)
    return y


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` for ``gate_up = [gate | up]`` on its last dim, as one kernel (SwiGLU's
    activation after its fused gate/up product). Returns [..., width], gate_up's dtype."""
    width = gate_up.shape[-1] // 2
    if gate_up.shape[-1] != 2 * width:
        raise ValueError(f"gate_up's last dim must be even, got {gate_up.shape[-1]}")
    gate_up = gate_up.contiguous()
    y = gate_up.new_empty((*gate_up.shape[:-1], width))
    numel = y.numel()
    if numel:
        with _on_device(gate_up):
            _silu_mul[(triton.cdiv(numel, FLAT_BLOCK),)](gate_up, y, numel, width, BLOCK=FLAT_BLOCK)
    return y


__all__ = ["FLAT_BLOCK", "add_rms_norm", "interpreted", "norm_rope", "rms_norm", "sigmoid_gate", "silu_mul",
           "unavailable_reason"]
