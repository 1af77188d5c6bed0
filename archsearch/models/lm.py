"""`LanguageModel`: token embedding, N pre-norm residual blocks, final norm, LM head.

Block i (nanoGPT layout, Linear-MoE Fig. 1 / MCSD Fig. 1):
  x = x + mixer_i(norm(x));  x = x + channel_mixer(norm(x))
where mixer_i comes from the i-th letter of the resolved layer pattern (N: softmax attention,
MHA/GQA/MQA or MLA per `attention.kind`; L: the linear family `linear.family`; M: MCSD) and
the channel mixer is the FFN of `ffn.kind` or the MoE. Norms are `arch.norm` (RMSNorm or
bias-free LayerNorm). The LM head is tied to the embedding when `tie_embeddings`.

Parameters: wte [V, d]; per block norm1 [d], mixer, norm2 [d], channel mixer; norm_f [d];
lm_head [V, d] (the same tensor as wte when tied).
Matmuls outside the blocks: lm_head [T, d] x [d, V] (the embedding is a lookup).
Init, scaled by fan-in: every Linear N(0, std 1/sqrt(fan_in)); residual output projections
(`o_proj` of the mixers, `down` of the FFNs and experts) further divided by sqrt(2 n_layers)
(GPT-2); an untied token embedding N(0, 1) (the first block's norm rescales it), a tied one
with std 1/sqrt(d) since it is also the LM head. At width ~2500 this is GPT-2's 0.02; at the
sandbox widths (64-512) 0.02 is several times too small and leaves small models unable to learn
in-context recall (benchmarks/bench_trainer_probes.py). Mixer-specific parameters (decays,
convolutions, norms) keep their modules' own initialisation.
Decoding state: `State(layers, pos)`, one dict of tensors per layer (KV cache, MLA latents,
recurrent state, conv / token-shift state) and the number of tokens seen.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from archsearch.arch import ArchConfig
from archsearch.models.gemm import Linear
from archsearch.models.moe import MoE
from archsearch.models.norm import make_norm
from archsearch.models.registry import build_channel_mixer, build_sequence_mixer

RESIDUAL_PROJECTIONS = ("o_proj.weight", "down.weight")


@dataclass
class State:
    """Per-layer decoding caches/states and the number of tokens already processed."""

    layers: list[dict[str, torch.Tensor]]
    pos: int = 0


class Block(nn.Module):
    def __init__(self, arch: ArchConfig, letter: str):
        super().__init__()
        self.letter = letter
        self.norm1 = make_norm(arch.norm, arch.d_model, arch.norm_eps)
        self.mixer = build_sequence_mixer(arch, letter)
        self.norm2 = make_norm(arch.norm, arch.d_model, arch.norm_eps)
        self.ffn = build_channel_mixer(arch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.mixer(self.norm1(x))
        return x + self.ffn(self.norm2(x))


class LanguageModel(nn.Module):
    def __init__(self, arch: ArchConfig):
        super().__init__()
        arch = arch.resolved()
        self.arch = arch
        d, V = arch.d_model, arch.vocab_size
        self.wte = nn.Embedding(V, d)
        self.blocks = nn.ModuleList(Block(arch, letter) for letter in arch.pattern)
        self.norm_f = make_norm(arch.norm, d, arch.norm_eps)
        self.lm_head = Linear(d, V, bias=False)
        if arch.tie_embeddings:
            self.lm_head.weight = self.wte.weight
        self.apply(init_weights)
        if arch.tie_embeddings:  # the embedding is also the LM head: scale it as one
            nn.init.normal_(self.wte.weight, mean=0.0, std=d**-0.5)
        depth = math.sqrt(2 * arch.n_layers)
        for name, p in self.named_parameters():
            if name.endswith(RESIDUAL_PROJECTIONS):
                nn.init.normal_(p, mean=0.0, std=p.shape[-1] ** -0.5 / depth)
        self.aux_loss = torch.zeros(())

    # -- training -------------------------------------------------------------------------------

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """idx [B, T] -> (logits [B, T, V], mean cross-entropy over targets != -1 (nanoGPT's
        ignore index) + aux_loss_coef * MoE aux loss)."""
        x = self.wte(idx)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.norm_f(x))
        aux = self._moe_aux()
        self.aux_loss = aux.detach()
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
            )
            if self.arch.moe is not None:
                loss = loss + self.arch.moe.aux_loss_coef * aux
        return logits, loss

    def _moe_aux(self) -> torch.Tensor:
        losses = [b.ffn.aux_loss for b in self.blocks if isinstance(b.ffn, MoE)]
        return torch.stack(losses).sum() if losses else torch.zeros(())

    # -- decoding -------------------------------------------------------------------------------

    def init_state(self, batch_size: int) -> State:
        w = self.wte.weight
        layers = [b.mixer.init_state(batch_size, w.device, w.dtype) for b in self.blocks]
        return State(layers, 0)

    def prefill(self, idx: torch.Tensor, state: State | None = None) -> tuple[torch.Tensor, State]:
        """Run the prompt idx [B, T] (after `state`, default empty) -> (logits [B, T, V], state)."""
        state = state if state is not None else self.init_state(idx.shape[0])
        x = self.wte(idx)
        layers = []
        for block, st in zip(self.blocks, state.layers):
            h, st = block.mixer.prefill(block.norm1(x), st, state.pos)
            x = x + h
            x = x + block.ffn(block.norm2(x))
            layers.append(st)
        return self.lm_head(self.norm_f(x)), State(layers, state.pos + idx.shape[1])

    def step(self, token: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        """One token per sequence, token [B] -> (logits [B, V], the advanced state)."""
        x = self.wte(token)
        layers = []
        for block, st in zip(self.blocks, state.layers):
            h, st = block.mixer.step(block.norm1(x), st, state.pos)
            x = x + h
            x = x + block.ffn(block.norm2(x))
            layers.append(st)
        return self.lm_head(self.norm_f(x)), State(layers, state.pos + 1)

    @torch.no_grad()
    def generate(
        self,
        idx: torch.Tensor,
        max_new_tokens: int,
        *,
        temperature: float = 1.0,
        top_k: int | None = None,
        greedy: bool = False,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Prefill idx [B, T], then decode `max_new_tokens` tokens; returns [B, T + new]."""
        if max_new_tokens <= 0:
            return idx
        logits, state = self.prefill(idx)
        logits = logits[:, -1]
        out = [idx]
        for i in range(max_new_tokens):
            token = sample(
                logits, temperature=temperature, top_k=top_k, greedy=greedy, generator=generator
            )
            out.append(token[:, None])
            if i + 1 < max_new_tokens:
                logits, state = self.step(token, state)
        return torch.cat(out, dim=1)

    @staticmethod
    def state_nbytes(state: State) -> int:
        """Bytes of the memory the decode state holds: the storages of its tensors, each counted
        once (so a view into a larger buffer would count the whole buffer)."""
        storages = {}
        for layer in state.layers:
            for t in layer.values():
                s = t.untyped_storage()
                storages[s.data_ptr()] = s.nbytes()
        return sum(storages.values())

    # -- accounting -----------------------------------------------------------------------------

    def num_params(self, exclude_embedding: bool = False) -> int:
        """Parameters (tied weights once); `exclude_embedding` leaves out the token embedding
        and an untied LM head."""
        n = sum(p.numel() for p in self.parameters())
        if exclude_embedding:
            n -= self.wte.weight.numel()
            if not self.arch.tie_embeddings:
                n -= self.lm_head.weight.numel()
        return n

    def num_active_params(self, exclude_embedding: bool = False) -> int:
        """Parameters used per token: MoE layers count only the router, top-k and shared
        experts."""
        n = self.num_params(exclude_embedding)
        for b in self.blocks:
            if isinstance(b.ffn, MoE):
                n -= sum(p.numel() for p in b.ffn.parameters()) - b.ffn.active_params()
        return n


def sample(
    logits: torch.Tensor,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    greedy: bool = False,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Pick one token per row of logits [B, V]: argmax, or sampling at `temperature` among the
    `top_k` most likely tokens."""
    if greedy or temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / temperature
    if top_k is not None:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator)[:, 0]


def init_weights(module: nn.Module) -> None:
    """Draw a Linear's or an Embedding's weights as a model's are (the module docstring's init,
    less the residual projections' depth scaling); `module.apply(init_weights)` for a tree."""
    if isinstance(module, nn.Linear):
        nn.init.normal_(module.weight, mean=0.0, std=module.in_features**-0.5)
    elif isinstance(module, nn.Embedding):
        nn.init.normal_(module.weight, mean=0.0, std=1.0)


def build_model(arch: ArchConfig) -> LanguageModel:
    """The language model an ArchConfig describes (built from `arch.resolved()`)."""
    return LanguageModel(arch)
