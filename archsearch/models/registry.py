"""Name -> class registries of the mixers, keyed by the names `archsearch.arch` declares.

YAML only ever names a mixer; the class is looked up here (nothing is instantiated from YAML).
Sequence mixers are built as `cls(arch)` from the resolved ArchConfig; channel mixers as
`cls(d_model, d_ffn)` (FFNs) or `MoE(arch)`.
"""

from __future__ import annotations

from torch import nn

from archsearch.arch import ArchConfig
from archsearch.models.attention import Attention
from archsearch.models.ffn import FFNS
from archsearch.models.linear import LINEAR_MIXERS
from archsearch.models.mcsd import MCSD
from archsearch.models.mla import MLA
from archsearch.models.moe import MoE

SEQUENCE_MIXERS: dict[str, type[nn.Module]] = {
    "attention": Attention,  # MHA / GQA / MQA
    "mla": MLA,
    **LINEAR_MIXERS,
    "mcsd": MCSD,
}
CHANNEL_MIXERS: dict[str, type[nn.Module]] = {**FFNS, "moe": MoE}


def sequence_mixer_name(arch: ArchConfig, letter: str) -> str:
    """The registry key of a layer's mixer from its pattern letter (N, L or M)."""
    if letter == "N":
        return "mla" if arch.attention.kind == "mla" else "attention"
    if letter == "L":
        return arch.linear.family
    return "mcsd"


def build_sequence_mixer(arch: ArchConfig, letter: str) -> nn.Module:
    return SEQUENCE_MIXERS[sequence_mixer_name(arch, letter)](arch)


def build_channel_mixer(arch: ArchConfig) -> nn.Module:
    if arch.moe is not None:
        return CHANNEL_MIXERS["moe"](arch)
    return CHANNEL_MIXERS[arch.ffn.kind](arch.d_model, arch.ffn.d_ffn)
