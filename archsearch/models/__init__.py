"""The architecture zoo: every candidate ArchConfig builds into a `LanguageModel`.

`build_model(arch)` is the entry point; `SEQUENCE_MIXERS` and `CHANNEL_MIXERS` are the registries
keyed by the names of `archsearch.arch` (attention kinds, linear families, MCSD; FFN kinds, MoE).
"""

from archsearch.models.lm import LanguageModel, State, build_model, init_weights
from archsearch.models.registry import (
    CHANNEL_MIXERS,
    SEQUENCE_MIXERS,
    build_channel_mixer,
    build_sequence_mixer,
    channel_mixer_class,
    sequence_mixer_class,
    sequence_mixer_name,
)

__all__ = [
    "CHANNEL_MIXERS",
    "SEQUENCE_MIXERS",
    "LanguageModel",
    "State",
    "build_channel_mixer",
    "build_model",
    "build_sequence_mixer",
    "channel_mixer_class",
    "init_weights",
    "sequence_mixer_class",
    "sequence_mixer_name",
]
