"""Linear sequence mixers of [Linear-MoE] Table 1, one family per module; the shared
recurrences (reference, chunked, one-step) live in `common`."""

from archsearch.models.linear.deltanet import DeltaNet, GatedDeltaNet
from archsearch.models.linear.gla import GLA
from archsearch.models.linear.hgrn2 import HGRN2
from archsearch.models.linear.linear_attention import LinearAttention
from archsearch.models.linear.mamba2 import Mamba2
from archsearch.models.linear.retnet import RetNet
from archsearch.models.linear.rwkv6 import RWKV6

LINEAR_MIXERS = {
    "linear_attention": LinearAttention,
    "retnet": RetNet,
    "gla": GLA,
    "deltanet": DeltaNet,
    "gated_deltanet": GatedDeltaNet,
    "mamba2": Mamba2,
    "hgrn2": HGRN2,
    "rwkv6": RWKV6,
}

__all__ = [
    "GLA",
    "HGRN2",
    "LINEAR_MIXERS",
    "RWKV6",
    "DeltaNet",
    "GatedDeltaNet",
    "LinearAttention",
    "Mamba2",
    "RetNet",
]
