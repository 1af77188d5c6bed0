"""Name -> class registries of the mixers, keyed by the names `archsearch.arch` declares.

YAML only ever names a mixer; the class is looked up here (nothing is instantiated from YAML).
Sequence mixers are built as `cls(arch)` from the resolved ArchConfig; channel mixers as
`cls(d_model, d_ffn)` (FFNs) or `MoE(arch)`. A name that is not built in is a plugin that an
installed package registers (`archsearch.plugins`): a linear family or FFN kind `pkg.name`.
"""

from __future__ import annotations

from torch import nn

from archsearch import plugins
from archsearch.arch import ArchConfig
from archsearch.models.attention import Attention
from archsearch.models.contract import satisfies
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


def sequence_mixer_class(name: str) -> type[nn.Module]:
    """The class of a built-in or plugin sequence mixer (a plugin must satisfy the contract's
    declarations, `archsearch.models.contract`)."""
    if name in SEQUENCE_MIXERS:
        return SEQUENCE_MIXERS[name]
    cls = plugins.load(plugins.MIXERS, name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module) and satisfies(cls)):
        raise plugins.PluginError(
            f"plugin {name!r} is not a sequence mixer: it needs an nn.Module class with forward, "
            "init_state, prefill, step, state_growth ('constant' or 'growing') and reads "
            "(see docs/MIXERS.md)"
        )
    return cls


def channel_mixer_class(name: str) -> type[nn.Module]:
    """The class of a built-in or plugin channel mixer (built as `cls(d_model, d_ffn)`)."""
    if name in CHANNEL_MIXERS:
        return CHANNEL_MIXERS[name]
    cls = plugins.load(plugins.CHANNEL_MIXERS, name)
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise plugins.PluginError(f"plugin {name!r} is not a channel mixer (an nn.Module class)")
    return cls


def build_sequence_mixer(arch: ArchConfig, letter: str) -> nn.Module:
    return sequence_mixer_class(sequence_mixer_name(arch, letter))(arch)


def build_channel_mixer(arch: ArchConfig) -> nn.Module:
    if arch.moe is not None:
        return CHANNEL_MIXERS["moe"](arch)
    return channel_mixer_class(arch.ffn.kind)(arch.d_model, arch.ffn.d_ffn)
