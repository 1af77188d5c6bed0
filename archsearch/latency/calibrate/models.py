"""The whole models a calibration times: the glue models (the memory terms are fitted to them),
the held-out models (the profile's validation) and the roofline's reference models.

None of them is one of `benchmarks/bench_latency_accuracy.py`'s held-out architectures (none
has one's width, depth and vocabulary: tests/test_bench_latency.py).
"""

from __future__ import annotations

from typing import NamedTuple

from archsearch.arch import (
    ArchConfig,
    AttentionConfig,
    LayersConfig,
    LinearConfig,
    MCSDConfig,
    MoEConfig,
)
from archsearch.cost.devices import DeviceProfile
from archsearch.cost.model import prefill_phase, step_phase, working_set
from archsearch.cost.ops import Columns, Phase

__all__ = ["WholeModel", "glue_models", "held_out_models", "reference_models", "timed_models"]

HELD_OUT_PROMPT, HELD_OUT_CONTEXT = 192, 384


class WholeModel(NamedTuple):
    """A model and the setting of its two phases: the prefill of `prompt` tokens and one decode
    step after `context`, on `batch` sequences."""

    arch: ArchConfig
    prompt: int = 128
    context: int = 128
    batch: int = 1

    def phases(self) -> tuple[Phase, Phase]:
        return prefill_phase(self.prompt, self.batch), step_phase(self.context, self.batch)

    def table(self) -> Columns:
        return Columns.from_archs([self.arch])

    def working_sets(self) -> tuple[float, float]:
        """Bytes the prefill and the decode step move per call (`cost.model.working_set`)."""
        c = self.table()
        forward, step = (float(working_set(c, p)[0]) for p in self.phases())
        return forward, step

    def predicted(self, device: DeviceProfile, precision: str = "fp32") -> tuple[float, float]:
        """(seconds to first token, seconds of the decode step) predicted on `device`."""
        from archsearch.latency.predict import decode_s, ttft_s

        c = self.table()
        return (
            float(ttft_s(c, device, self.prompt, precision, self.batch)[0]),
            float(decode_s(c, device, self.context, precision, self.batch)[0]),
        )

    def setting(self) -> dict:
        return {
            "arch": self.arch.summary(),
            "prompt": self.prompt,
            "context": self.context,
            "batch": self.batch,
        }


def _arch(d: int, depth: int, vocab: int = 2048, seq: int = 4096, **sections) -> ArchConfig:
    return ArchConfig(vocab_size=vocab, d_model=d, n_layers=depth, max_seq_len=seq, **sections)


def _attn(**kw) -> dict:
    return {"attention": AttentionConfig(**kw)}


def _lin(family: str) -> dict:
    return {"layers": LayersConfig(mixer="linear"), "linear": LinearConfig(family=family)}


def _mcsd(channels: int) -> dict:
    return {"layers": LayersConfig(mixer="mcsd"), "mcsd": MCSDConfig(n_channels=channels)}


def glue_models() -> list[WholeModel]:
    """Forty models whose working sets span the cache and beyond: thirteen small and large ones
    at one setting; ten at other prompts, contexts and batches, whose working sets fill the
    range where a shared cache runs out; five wide ones at batch 8 (their GEMMs' compute hides
    stalls: `predict.Memory.overlap`); four deep and narrow ones in the cache (they tell the
    per-layer miss from the stalls); eight of 16-39 MiB on one sequence (where the share that
    misses a cache of a few tens of MiB goes from 0 to 1)."""
    big = 4096
    fixed = [
        _arch(256, 4, **_attn(n_heads=4, n_kv_heads=2)),
        _arch(192, 3, **_lin("gla")),
        _arch(384, 2, **_attn(kind="mla", n_heads=4, kv_rank=96)),
        _arch(256, 2, **_lin("mamba2")),
        _arch(128, 6, **_lin("deltanet")),
        _arch(256, 3, **_mcsd(4)),
        _arch(192, 2, **_attn(n_heads=3, n_kv_heads=1), moe=MoEConfig(4, 2, d_expert=192)),
        _arch(320, 2, **_lin("rwkv6")),
        _arch(768, 2, **_attn(n_heads=12, n_kv_heads=4)),
        _arch(640, 3, **_lin("retnet")),
        _arch(1024, 2, **_mcsd(8)),
        _arch(1024, 5, 8192, **_attn(n_heads=16, n_kv_heads=4)),
        _arch(768, 8, 8192, **_lin("gla")),
    ]
    moe = MoEConfig(n_experts=8, top_k=2, d_expert=576)
    settings = [
        (_arch(640, 3, big, **_attn(n_heads=10, n_kv_heads=2)), 256, 1024, 1),
        (_arch(896, 2, big, **_attn(kind="mla", n_heads=7, kv_rank=224, rope_dim=32)), 128, 512, 1),
        (_arch(960, 3, big, **_lin("hgrn2")), 64, 256, 2),
        (_arch(512, 5, big, **_lin("retnet")), 256, 2048, 1),
        (_arch(768, 4, big, **_lin("mamba2")), 128, 256, 4),
        (_arch(384, 7, big, **_lin("deltanet")), 64, 1024, 2),
        (_arch(704, 5, big, **_lin("gated_deltanet")), 192, 512, 1),
        (_arch(576, 5, big, **_attn(n_heads=9, n_kv_heads=3), moe=moe), 128, 512, 2),
        (_arch(448, 3, big, **_lin("hgrn2")), 64, 256, 8),
        (_arch(320, 4, big, **_attn(kind="mla", n_heads=5, kv_rank=80)), 96, 512, 8),
        (_arch(832, 3, big, **_attn(n_heads=13, n_kv_heads=1)), 64, 256, 8),
        (_arch(640, 2, big, **_lin("gla")), 64, 256, 8),
        (_arch(1024, 3, big, **_attn(kind="mha", n_heads=8)), 64, 256, 8),
        (_arch(1088, 2, big, **_lin("deltanet")), 64, 256, 8),
        (_arch(1152, 2, big, **_lin("retnet")), 64, 256, 8),
    ]
    deep = [
        _arch(96, 10, **_attn(n_heads=2, n_kv_heads=1)),
        _arch(64, 12, **_lin("gla")),
        _arch(160, 9, **_lin("retnet")),
        _arch(192, 8, **_mcsd(4)),
    ]
    edge = [
        _arch(160, 10, big, **_lin("linear_attention")),
        _arch(288, 5, big, **_attn(n_heads=6, n_kv_heads=2)),
        _arch(224, 7, big, **_attn(kind="mha", n_heads=4)),
        _arch(544, 2, **_attn(n_heads=8, n_kv_heads=2), moe=MoEConfig(4, 2, d_expert=544)),
        _arch(224, 8, big, **_lin("mamba2")),
        _arch(352, 4, big, **_lin("rwkv6")),
        _arch(416, 3, big, **_lin("retnet")),
        _arch(480, 3, **_lin("gated_deltanet")),
    ]
    return [
        *(WholeModel(a) for a in fixed),
        *(WholeModel(*s) for s in settings),
        *(WholeModel(a) for a in deep + edge),
    ]


def held_out_models() -> list[WholeModel]:
    """Twelve models no other step times (other shapes, vocabulary and lengths)."""
    v, gqa = 3000, _attn(n_heads=4, n_kv_heads=2)
    archs = [
        _arch(320, 3, v, **_attn(kind="mha", n_heads=5)),
        _arch(256, 3, v, **_lin("retnet")),
        _arch(448, 2, v, **_attn(kind="mqa", n_heads=7)),
        _arch(384, 2, v, **_lin("hgrn2")),
        _arch(192, 4, v, **_attn(kind="mla", n_heads=3, kv_rank=48, q_rank=96, rope_dim=16)),
        _arch(192, 4, v, **_lin("linear_attention")),
        _arch(320, 2, v, **_lin("gated_deltanet")),
        _arch(256, 4, v, layers=LayersConfig(pattern="LN"), linear=LinearConfig("gla"), **gqa),
        _arch(448, 2, v, **_mcsd(8)),
        _arch(896, 2, v, **_attn(kind="mha", n_heads=14)),
        _arch(704, 3, v, **_lin("gla")),
        _arch(256, 3, v, **_attn(n_heads=4, n_kv_heads=1), moe=MoEConfig(8, 2, d_expert=128)),
    ]
    return [WholeModel(a, HELD_OUT_PROMPT, HELD_OUT_CONTEXT) for a in archs]


def reference_models() -> list[WholeModel]:
    """Small models of seven kinds at three sizes, deep-narrow to wide-shallow (the weights, the
    arithmetic and the operator count vary apart): the roofline's factors are fitted to them."""
    out = []
    for d, depth in ((128, 8), (320, 3), (640, 2)):
        h = d // 64
        kinds = [
            _attn(n_heads=h, n_kv_heads=1),
            _attn(kind="mla", n_heads=h, kv_rank=d // 4),
            _lin("gla"),
            _lin("mamba2"),
            _lin("deltanet"),
            _mcsd(4),
            {**_attn(n_heads=h, n_kv_heads=1), "moe": MoEConfig(4, 2, d_expert=d)},
        ]
        out += [WholeModel(_arch(d, depth, 4096, 1024, **k)) for k in kinds]
    return out


def timed_models(entries: list[dict]) -> list[WholeModel]:
    """The glue or held-out models of a calibration's recorded timings, each entry as
    `WholeModel.setting` wrote it."""
    known = {m.arch.summary(): m.arch for m in glue_models() + held_out_models()}
    return [WholeModel(known[e["arch"]], e["prompt"], e["context"], e["batch"]) for e in entries]
