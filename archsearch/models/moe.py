"""Mixture of experts replacing the FFN (Switch Transformer / DeepSeek-V2 style token choice).

Routing: p = softmax(x W_r) over the E experts; each token goes to its top-k experts with gate
weights p_e (not renormalised over the top k). Dispatch without dropping tokens: the N * k
(token, expert) pairs are sorted by expert, each expert runs once on exactly the tokens routed
to it, and the gated outputs are scattered back (index_add). `n_shared` shared experts see every
token. All experts (routed and shared) are FFNs of kind `ffn.kind` and width `moe.d_expert`.
Load-balancing loss (Switch, eq. 4): aux = E * Σ_i f_i P_i, f_i the fraction of the N * k
assignments that went to expert i, P_i the mean router probability of expert i (1 when
balanced); the LM adds `moe.aux_loss_coef` times its sum over layers.

Parameters: router: d -> E; experts: E FFNs (d, d_expert); shared: n_shared FFNs (d, d_expert).
Active parameters per token: router + (top_k + n_shared) * one expert.
Matmuls: router [N, d] x [d, E]; expert e: its FFN matmuls on its n_e routed tokens
(Σ_e n_e = N k); shared experts on all N tokens. The routed experts' matmuls run on F.linear,
not oneDNN (`gemm.Linear.onednn`): their row counts change every step.
"""

from __future__ import annotations

import torch
from torch import nn

from archsearch.arch import ArchConfig
from archsearch.models.ffn import FFNS
from archsearch.models.gemm import Linear


class MoE(nn.Module):
    def __init__(self, arch: ArchConfig):
        super().__init__()
        m, d = arch.moe, arch.d_model
        ffn = FFNS[arch.ffn.kind]
        self.n_experts, self.top_k = m.n_experts, m.top_k
        self.router = Linear(d, m.n_experts, bias=False)
        self.experts = nn.ModuleList(ffn(d, m.d_expert) for _ in range(m.n_experts))
        for layer in self.experts.modules():  # their batch sizes change with the routing
            if isinstance(layer, Linear):
                layer.onednn = False
        self.shared = nn.ModuleList(ffn(d, m.d_expert) for _ in range(m.n_shared))
        self.aux_loss: torch.Tensor | None = None
        self.last_counts: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        N, E, k = x.shape[0], self.n_experts, self.top_k
        probs = torch.softmax(self.router(x), dim=-1)
        weights, experts = probs.topk(k, dim=-1)  # [N, k]
        flat = experts.reshape(-1)
        order = flat.argsort(stable=True)
        counts = torch.bincount(flat, minlength=E)
        token = order // k
        xs, gates = x[token], weights.reshape(-1)[order]
        ys, start = [], 0
        for e, n in enumerate(counts.tolist()):
            if n:
                ys.append(self.experts[e](xs[start : start + n]))
            start += n
        y = torch.cat(ys) * gates[:, None]
        out = x.new_zeros(x.shape).index_add(0, token, y.to(x.dtype))  # autocast: y in bf16
        for expert in self.shared:
            out = out + expert(x)
        f = counts.to(probs.dtype) / (N * k)
        self.aux_loss = E * (f * probs.mean(0)).sum()
        self.last_counts = counts.tolist()
        return out.view(shape)

    def active_params(self) -> int:
        """Parameters used per token: the router, top_k routed and all shared experts."""
        one = sum(p.numel() for p in self.experts[0].parameters())
        return self.router.weight.numel() + (self.top_k + len(self.shared)) * one
