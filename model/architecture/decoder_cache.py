"""Decoder caches: where the masked self-attention finds earlier positions' keys and values, and where
the step's own go. The decoder asks its cache for the step's positions and for each layer's attention.

- ConcatCache: the past as tensors (B, H, P, Dh) with a mask; the step's K/V are handed back, not
  appended. For PyTorch use: training (an empty past), tests, reference decoding.
- BufferCache: one fixed buffer (B, H, L, Dh) per layer for keys and one for values, and each row's
  filled length; the step writes its K/V at each row's length and attends to what is filled. Exported
  as ONNX Runtime's com.microsoft.GroupQueryAttention: with the same buffer bound as its past input
  and present output, it writes in place and reads only each row's filled positions, so a step neither
  copies the cache nor pays for the buffer's unused length. ONNX Runtime runs the op on the CPU in
  float32 and float16, on CUDA in float16 and bfloat16 only: for CUDA the graph is converted to
  float16 (model/export/half_precision.py), else its attention would fall back to the CPU.
- NoCache: no past at all: a whole target in one pass under a causal mask (teacher forcing), with plain
  attention whose weights can be recorded (the attention-map graph, model/export/attention_graph.py).
"""

from __future__ import annotations

import torch
from torch import Tensor

from model.architecture.attention import KeysValues, MultiHeadAttention, attention


class ConcatCache:
    def __init__(self, past: list[tuple[Tensor, Tensor]], past_mask: Tensor):
        """past[i]: layer i's K/V (B, H, P, Dh), P may be 0; past_mask (B, P): 1 at filled positions."""
        self.past, self.past_mask = past, past_mask
        self.new: list[tuple[Tensor, Tensor]] = []  # each layer's K/V of the step's positions (B, H, T, Dh)

    @staticmethod
    def empty(batch: int, n_layers: int, n_heads: int, d_head: int, dtype=torch.float32) -> ConcatCache:
        nothing = torch.zeros(batch, n_heads, 0, d_head, dtype=dtype)
        return ConcatCache([(nothing, nothing)] * n_layers, torch.zeros(batch, 0, dtype=torch.long))

    def positions(self, input_ids: Tensor) -> Tensor:
        """(B, T): a sequence's next position is the number of positions it has filled."""
        filled = self.past_mask.sum(dim=-1, keepdim=True)
        return filled + torch.arange(input_ids.shape[1], device=input_ids.device)[None]

    def key_positions(self, input_ids: Tensor) -> Tensor:
        """(B, P + T): the positions of the keys a step's queries read, the past's then the step's own."""
        past = torch.arange(self.past_mask.shape[1], device=input_ids.device)[None].expand(input_ids.shape[0], -1)
        return torch.cat([past, self.positions(input_ids)], dim=1)

    def attend(self, layer: int, attn: MultiHeadAttention, h: Tensor, bias: Tensor | None = None) -> Tensor:
        """bias: (B, H, T, P + T) over key_positions, or None."""
        keys, values = attn.project_kv(h)
        self.new.append((keys, values))
        length = h.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=h.device).tril()[None]  # (1, T, T)
        past_k, past_v = self.past[layer]
        past = KeysValues(past_k, past_v, self.past_mask.bool()[:, None, :])
        return attn(h, [past, KeysValues(keys, values, causal)], bias)


class BufferCache:
    def __init__(self, keys: list[Tensor], values: list[Tensor], lengths: Tensor, total: Tensor | None = None):
        """keys[i], values[i]: layer i's buffers (B, H, L, Dh); lengths (B) int32: positions filled per row;
        total (1) int32: the longest row after the step (an input of the exported step, given by the host;
        computed from lengths when not given)."""
        self.keys, self.values, self.lengths, self.total = keys, values, lengths, total
        self.present: list[tuple[Tensor, Tensor]] = []  # the buffers with the step's K/V written in

    def positions(self, input_ids: Tensor) -> Tensor:
        return self.lengths.long()[:, None] + torch.arange(input_ids.shape[1], device=input_ids.device)[None]

    def total_length(self, input_ids: Tensor) -> Tensor:
        """(1) int32: the longest row after the step."""
        return self.total if self.total is not None else (self.lengths.max() + input_ids.shape[1]).reshape(1)

    def key_positions(self, input_ids: Tensor) -> Tensor:
        """(1, total): the buffer positions a step reads, up to the longest row's (GroupQueryAttention's
        total_sequence_length)."""
        return torch.arange(self.total_length(input_ids)[0].long(), device=input_ids.device)[None]

    def attend(self, layer: int, attn: MultiHeadAttention, h: Tensor, bias: Tensor | None = None) -> Tensor:
        """bias: (B, H, T, total) over key_positions, or None."""
        out, present_k, present_v = BufferedAttention.apply(
            attn.w_q(h),
            attn.w_k(h),
            attn.w_v(h),
            self.keys[layer],
            self.values[layer],
            self.lengths,
            self.total_length(h),
            attn.n_heads,
            attn.scale,
            bias,
        )
        self.present.append((present_k, present_v))
        return attn.w_o(out)


class BufferedAttention(torch.autograd.Function):
    """Causal attention of the step's T positions over a row's filled buffer positions and themselves,
    with the step's K/V written into the buffer at the row's length. In PyTorch: the reference
    computation (over the whole buffer, masked). In ONNX: GroupQueryAttention (opset com.microsoft)."""

    @staticmethod
    def forward(ctx, q, k, v, key_buffer, value_buffer, lengths, total, n_heads: int, scale: float, bias=None):
        """q, k, v (B, T, H * Dh); buffers (B, H, L, Dh); lengths (B); total (1), the longest row after the
        step; bias (B, H, T, total) or None -> out (B, T, H * Dh), the buffers."""
        batch, steps, width = q.shape
        d_head = width // n_heads

        def heads(x):
            return x.view(batch, steps, n_heads, d_head)  # (B, T, H, Dh)

        position = lengths.long()[:, None] + torch.arange(steps)[None]  # (B, T)
        rows = torch.arange(batch)[:, None].expand(batch, steps)
        present_k, present_v = key_buffer.clone(), value_buffer.clone()
        present_k[rows, :, position] = heads(k)
        present_v[rows, :, position] = heads(v)
        read = int(total[0])  # the positions the step reads: up to the longest row's
        visible = torch.arange(read)[None, None, :] <= position[:, :, None]  # (B, T, total)
        keys_values = KeysValues(present_k[:, :, :read], present_v[:, :, :read], visible)
        out = attention(heads(q).transpose(1, 2), [keys_values], scale, bias=bias)
        return out.transpose(1, 2).reshape(batch, steps, width), present_k, present_v

    @staticmethod
    def symbolic(g, q, k, v, key_buffer, value_buffer, lengths, total, n_heads: int, scale: float, bias=None):
        steps = g.op("Gather", g.op("Shape", q), g.op("Constant", value_t=torch.tensor(1)), axis_i=0)
        # seqlens_k: each row's length after the step, minus one, on the device; total: from the host.
        # The step's last offset (steps - 1) comes from a Range, which runs on the device from host
        # scalars: a shape value added to device data directly would need a copy node, and CUDA graph
        # capture refuses graphs with copy nodes (tests/test_export.py).
        offsets = g.op(
            "Range", g.op("Constant", value_t=torch.tensor(0)), steps, g.op("Constant", value_t=torch.tensor(1))
        )
        last = g.op("Cast", g.op("ReduceMax", offsets, keepdims_i=0), to_i=6)  # int32, as lengths
        seqlens = g.op("Add", lengths, last)
        inputs = [q, k, v, key_buffer, value_buffer, seqlens, total]
        if bias is not None and not bias.node().mustBeNone():  # attention_bias: T5's relative positions
            omitted = []
            for _ in range(3):  # cos_cache, sin_cache, position_ids: omitted ("" in ONNX)
                omitted.append(g.op("prim::Constant"))
                omitted[-1].setType(torch._C.OptionalType.ofTensor())
            inputs += [*omitted, bias]
        out, present_k, present_v = g.op(
            "com.microsoft::GroupQueryAttention",
            *inputs,
            num_heads_i=n_heads,
            kv_num_heads_i=n_heads,
            scale_f=scale,
            outputs=3,
        )
        # The exporter cannot infer a contrib op's shapes: the output is shaped as q, the present as the past.
        out.setType(q.type())
        present_k.setType(key_buffer.type())
        present_v.setType(value_buffer.type())
        return out, present_k, present_v


class NoCache:
    """Every position of the step is the target's own: position t attends to positions 0..t."""

    def positions(self, input_ids: Tensor) -> Tensor:
        return torch.arange(input_ids.shape[1], device=input_ids.device)[None]

    def key_positions(self, input_ids: Tensor) -> Tensor:
        return self.positions(input_ids)

    def attend(self, layer: int, attn: MultiHeadAttention, h: Tensor, bias: Tensor | None = None) -> Tensor:
        keys, values = attn.project_kv(h)
        length = h.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=h.device).tril()[None]  # (1, T, T)
        return attn(h, [KeysValues(keys, values, causal)], bias)
