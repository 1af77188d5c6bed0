"""`ArchConfig`: the typed, validated description of one candidate language model.

An `ArchConfig` is plain data: it names every choice the models, the cost model and the trainer
need (vocabulary, width, depth, the per-layer sequence mixer, attention/linear/MCSD parameters,
the FFN and MoE), round-trips to YAML, and has a canonical hash so that two spellings of the same
architecture (an `LLLN` pattern or a 25% interleaved attention share at depth 12; MHA written as
`gqa` with as many KV heads as heads; a defaulted `head_dim` or an explicit one) hash the same.

Layers. Every layer is a pre-norm block with one sequence mixer and one channel mixer. The
sequence mixer of layer i is a letter of the resolved layer pattern ([Linear-MoE] section 3.3
writes hybrids as `LLLN`):

- `N`: softmax attention ("normal" transformer layer), configured by `attention`
  (MHA/GQA/MQA through `n_kv_heads`, or MLA with `kv_rank`, [PLM] section 2);
- `L`: a linear sequence mixer of the family `linear.family` ([Linear-MoE] Table 1);
- `M`: the MCSD block ([MCSD] section 2.2), configured by `mcsd`.

The pattern comes either from `layers.pattern` (tiled to the depth) or from `layers.mixer` with
`layers.attention_share` of its layers replaced by softmax attention at `layers.placement`.

Nothing here imports torch; the mixer, FFN and device names are the registries' keys, checked
against the model registries by the test suite.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from archsearch import plugins, yamlio
from archsearch.errors import UserError
from archsearch.resources import check_name, conf_dir, resolve

# tokens per chunk of the chunked (training) forms of the linear mixers and MCSD: the models
# (`archsearch.models.linear.common`, `archsearch.models.mcsd`) and the cost model count with it
CHUNK = 64

# ---- registered names -------------------------------------------------------------------------

MIXERS = ("attention", "linear", "mcsd")
LETTER_OF_MIXER = {"attention": "N", "linear": "L", "mcsd": "M"}
MIXER_OF_LETTER = {v: k for k, v in LETTER_OF_MIXER.items()}
ATTENTION_KINDS = ("mha", "gqa", "mqa", "mla")
LINEAR_FAMILIES = (
    "linear_attention",
    "retnet",
    "gla",
    "deltanet",
    "gated_deltanet",
    "mamba2",
    "hgrn2",
    "rwkv6",
)
FEATURE_MAPS = ("identity", "elu", "relu")
FFN_KINDS = ("swiglu", "geglu", "relu2", "gelu")
GATED_FFNS = ("swiglu", "geglu")
NORMS = ("rmsnorm", "layernorm")
PLACEMENTS = ("interleaved", "bottom", "top", "sandwich")

# Fields whose value must be one of a set of registered names.
CHOICES: dict[str, tuple[str, ...]] = {
    "norm": NORMS,
    "layers.mixer": MIXERS,
    "layers.placement": PLACEMENTS,
    "attention.kind": ATTENTION_KINDS,
    "linear.family": LINEAR_FAMILIES,
    "linear.feature_map": FEATURE_MAPS,
    "ffn.kind": FFN_KINDS,
}


def is_known(key: str, value: Any) -> bool:
    """Whether `value` is a registered name for the field `key` (a key of CHOICES): a built-in,
    or a plugin that an installed package registers (`archsearch.plugins`)."""
    if value in CHOICES[key]:
        return True
    group = plugins.FIELD_GROUP.get(key)
    return group is not None and plugins.is_plugin(group, value)


def known_names(key: str) -> tuple[str, ...]:
    """Every registered name of the field `key`: the built-ins, then the installed plugins."""
    group = plugins.FIELD_GROUP.get(key)
    return CHOICES[key] + (plugins.names(group) if group else ())


# Upper bounds on an architecture's integers: beyond them a number is a typo or hostile, and
# resolving (a letter per layer) or pricing such a model would exhaust memory or overflow.
SIZE_LIMITS = {"n_layers": 4096, "vocab_size": 2**24, "max_seq_len": 2**24}
MAX_DIM = 2**20  # every other integer: widths, heads, ranks, experts, channels, windows


def size_limit(key: str) -> int:
    """The largest value the integer field `key` (a key path) may take."""
    return SIZE_LIMITS.get(key, MAX_DIM)


class InvalidArch(UserError):
    """An architecture that cannot be built; `reason` is a short stable name used in counts."""

    def __init__(
        self, reason: str, message: str, *, key: str | None = None, source: str | None = None
    ):
        self.reason = reason
        super().__init__(message, key=key, source=source)


# ---- sections ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class LayersConfig:
    """Which sequence mixer each layer uses.

    `pattern` (letters N/L/M, tiled to the depth) wins when given. Otherwise every layer uses
    `mixer`, and `attention_share` of them (rounded to the nearest count, at least one when the
    share is positive) become softmax attention, placed `interleaved` (evenly, each attention
    layer closing its group, so 1/4 of 12 gives LLLNLLLNLLLN), at the `bottom`, at the `top`, or
    as a `sandwich` (half at the bottom, the rest at the top).
    """

    mixer: str = "attention"
    attention_share: float = 0.0
    placement: str = "interleaved"
    pattern: str | None = None


@dataclass(frozen=True)
class AttentionConfig:
    """Softmax attention: MHA/GQA/MQA (`n_kv_heads`), or MLA ([PLM] section 2, App. D).

    For MLA, `head_dim` is the per-head non-rotary query/key size (d_nope), `rope_dim` the
    decoupled rotary key size shared by all heads, `v_head_dim` the value size, `kv_rank` the
    compressed KV latent (d_c) and `q_rank` an optional query compression (PLM uses none).
    For MHA/GQA/MQA, `rope_dim` is the number of rotary dimensions per head (default: all).
    `window` limits attention to the last `window` positions (sliding window).
    """

    kind: str = "gqa"
    n_heads: int = 4
    n_kv_heads: int | None = None
    head_dim: int | None = None
    v_head_dim: int | None = None
    kv_rank: int | None = None
    q_rank: int | None = None
    rope_dim: int | None = None
    rope_theta: float = 10000.0
    window: int | None = None


@dataclass(frozen=True)
class LinearConfig:
    """A linear sequence mixer of the unified recurrence M_s = Θ_s ◇ M_{s-1} + k_s^T v_s
    ([Linear-MoE] eq. 5, Table 1).

    The value path is `expand * d_model` wide, split into `n_heads` heads of `value_dim`; each
    head keeps a `key_dim x value_dim` state (for mamba2 `key_dim` is d_state, shared by heads).
    `feature_map` and `normalize` apply to `linear_attention`; `gate_rank` is the low-rank width
    of data-dependent gates (GLA, RWKV6); `conv_size` a short causal convolution (mamba2,
    deltanet, gated_deltanet; 0 disables); `output_gate` a SiLU output gate.
    """

    family: str = "gla"
    n_heads: int | None = None
    key_dim: int | None = None
    value_dim: int | None = None
    expand: float | None = None
    feature_map: str | None = "identity"
    normalize: bool | None = False
    gate_rank: int | None = 16
    conv_size: int | None = 4
    output_gate: bool = True


@dataclass(frozen=True)
class MCSDConfig:
    """The MCSD block ([MCSD] section 2.2): `n_channels` channels of width d_model / C."""

    n_channels: int = 8


@dataclass(frozen=True)
class FFNConfig:
    """The channel mixer: gated (swiglu, geglu) or not (relu2 as in [PLM] eq. 3, gelu).

    `d_ffn` defaults to 4 * d_model (non-gated) or 8/3 * d_model rounded up to 64 (gated).
    """

    kind: str = "swiglu"
    d_ffn: int | None = None


@dataclass(frozen=True)
class MoEConfig:
    """Mixture of experts replacing the FFN in every layer: `n_experts` experts of `d_expert`
    (default `ffn.d_ffn`, activation `ffn.kind`), top-k softmax routing, `n_shared` always-on
    experts, and a load-balancing loss weighted by `aux_loss_coef`."""

    n_experts: int = 8
    top_k: int = 2
    n_shared: int = 0
    d_expert: int | None = None
    aux_loss_coef: float = 0.01


@dataclass(frozen=True)
class ArchConfig:
    """One candidate language model. See the module docstring for the layer layout."""

    vocab_size: int
    d_model: int
    n_layers: int
    name: str = ""
    max_seq_len: int = 2048
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    tie_embeddings: bool = True
    layers: LayersConfig = field(default_factory=LayersConfig)
    attention: AttentionConfig | None = None
    linear: LinearConfig | None = None
    mcsd: MCSDConfig | None = None
    ffn: FFNConfig = field(default_factory=FFNConfig)
    moe: MoEConfig | None = None

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_dict(cls, data: Any, *, source: str | None = None) -> ArchConfig:
        """Build and validate from plain data; errors name `source` and the key path."""
        arch = _load_dataclass(cls, data, source=source, path="")
        arch.validate(source=source)
        return arch

    @classmethod
    def from_yaml(cls, path: str | Path) -> ArchConfig:
        return cls.from_dict(yamlio.load(path), source=str(path))

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self) -> str:
        return yamlio.dumps(self.to_dict())

    def with_name(self, name: str) -> ArchConfig:
        return replace(self, name=name)

    # -- derived facts ----------------------------------------------------------------------------

    @property
    def pattern(self) -> str:
        """The resolved per-layer mixer letters, one per layer (e.g. 'LLLNLLLNLLLN')."""
        return _resolve_pattern(self.layers, self.n_layers)

    @property
    def n_attention_layers(self) -> int:
        return self.pattern.count("N")

    @property
    def attention_share(self) -> float:
        return self.n_attention_layers / self.n_layers

    @property
    def is_moe(self) -> bool:
        return self.moe is not None and self.moe.n_experts > 0

    @property
    def family(self) -> str:
        """A short family label for plots and tables: the non-attention mixer, with '+attn' for
        hybrids (e.g. 'gla+attn', 'mla', 'mcsd')."""
        letters = set(self.pattern)
        att = self.resolved().attention
        att_name = att.kind if att is not None else "attention"
        others = [c for c in ("L", "M") if c in letters]
        if not others:
            return att_name
        name = (
            self.linear.family if others[0] == "L" and self.linear else MIXER_OF_LETTER[others[0]]
        )
        if len(others) == 2:
            name += "+mcsd"
        return f"{name}+{att_name}" if "N" in letters else name

    def summary(self) -> str:
        """One line: depth x width, mixer layout, FFN/MoE."""
        r = self.resolved()
        parts = [f"{r.n_layers}x{r.d_model}", r.family]
        if len(set(r.pattern)) > 1:
            parts.append(r.pattern if r.n_layers <= 16 else f"{r.n_attention_layers}N/{r.n_layers}")
        if r.attention is not None:
            a = r.attention
            heads = f"h{a.n_heads}" + (f"/kv{a.n_kv_heads}" if a.kind in ("gqa", "mqa") else "")
            if a.kind == "mla":
                heads += f"x{a.head_dim} r{a.kv_rank}" + (f" q{a.q_rank}" if a.q_rank else "")
            parts.append(heads)
        if r.linear is not None:
            parts.append(f"lh{r.linear.n_heads}")
        if r.mcsd is not None:
            parts.append(f"C{r.mcsd.n_channels}")
        if r.moe is not None:
            parts.append(
                f"moe{r.moe.n_experts}x{r.moe.d_expert} top{r.moe.top_k}"
                + (f"+{r.moe.n_shared}s" if r.moe.n_shared else "")
            )
        else:
            parts.append(f"{r.ffn.kind} {r.ffn.d_ffn}")
        return " ".join(parts)

    # -- validation -----------------------------------------------------------------------------

    def validate(self, *, source: str | None = None) -> None:
        """Raise `InvalidArch` (with a reason name and the key path) if this cannot be built."""

        def bad(reason: str, key: str, message: str) -> InvalidArch:
            return InvalidArch(reason, message, key=key, source=source)

        if self.name:
            check_name(self.name, what="architecture", key="name", source=source)
        _check_sizes(self, "", bad)
        for key in CHOICES:
            value = _get_path(self, key)
            if value is not None and not is_known(key, value):
                known = ", ".join(known_names(key))
                raise bad("unknown_name", key, f"unknown value {value!r} (known: {known})")
        for key in ("vocab_size", "d_model", "n_layers", "max_seq_len"):
            if getattr(self, key) <= 0:
                raise bad("non_positive", key, f"must be positive, got {getattr(self, key)}")
        if self.norm_eps <= 0:
            raise bad("non_positive", "norm_eps", f"must be positive, got {self.norm_eps}")

        pattern = _check_layers(self.layers, self.n_layers, bad)
        letters = set(pattern)
        needs = {
            "N": ("attention", self.attention),
            "L": ("linear", self.linear),
            "M": ("mcsd", self.mcsd),
        }
        for letter, (section, value) in needs.items():
            if letter in letters and value is None:
                raise bad(
                    "missing_section",
                    section,
                    f"the layer pattern {pattern!r} has {MIXER_OF_LETTER[letter]} layers "
                    f"({letter}) but the architecture has no '{section}' section",
                )
        d = self.d_model
        if "N" in letters:
            _check_attention(self.attention, d, self.max_seq_len, bad)
        if "L" in letters:
            _check_linear(self.linear, d, bad)
        if "M" in letters:
            _check_mcsd(self.mcsd, d, bad)
        ffn = self.ffn
        if ffn.d_ffn is not None and ffn.d_ffn <= 0:
            raise bad("non_positive", "ffn.d_ffn", f"must be positive, got {ffn.d_ffn}")
        if self.moe is not None:
            _check_moe(self.moe, ffn, bad)

    # -- canonical form -------------------------------------------------------------------------

    def resolved(self) -> ArchConfig:
        """Every default filled in, the layout spelled as an explicit full-depth pattern, and
        every section or field that does not affect the built model set to None."""
        pattern = self.pattern
        letters = set(pattern)
        d = self.d_model
        attention = (
            _resolve_attention(self.attention, d, self.max_seq_len) if "N" in letters else None
        )
        linear = _resolve_linear(self.linear, d) if "L" in letters else None
        mcsd = self.mcsd if "M" in letters else None
        moe = None
        ffn = _resolve_ffn(self.ffn, d)
        if self.is_moe:
            m = self.moe
            moe = replace(m, d_expert=m.d_expert or ffn.d_ffn)
            ffn = replace(ffn, d_ffn=None)
        others = [c for c in pattern if c != "N"]
        layers = LayersConfig(
            mixer=MIXER_OF_LETTER[others[0]] if others else "attention",
            attention_share=pattern.count("N") / len(pattern),
            placement=self.layers.placement,
            pattern=pattern,
        )
        return replace(
            self, layers=layers, attention=attention, linear=linear, mcsd=mcsd, ffn=ffn, moe=moe
        )

    def canonical_dict(self) -> dict[str, Any]:
        """The resolved form without the name: equal for two spellings of one architecture."""
        d = self.resolved().to_dict()
        d.pop("name")
        d["layers"] = {"pattern": d["layers"]["pattern"]}
        return d

    @property
    def arch_hash(self) -> str:
        """A stable 12-hex-digit hash of `canonical_dict()`."""
        blob = json.dumps(self.canonical_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _check_sizes(obj: Any, prefix: str, bad) -> None:
    """Every integer within its `size_limit` (sections checked recursively)."""
    for f in fields(obj):
        value, key = getattr(obj, f.name), f"{prefix}{f.name}"
        if dataclasses.is_dataclass(value):
            _check_sizes(value, f"{key}.", bad)
        elif isinstance(value, int) and not isinstance(value, bool) and value > size_limit(key):
            raise bad("too_large", key, f"{value} is above the limit {size_limit(key):,}")


# ---- layer layouts ----------------------------------------------------------------------------


def attention_positions(n_layers: int, n_attention: int, placement: str) -> list[int]:
    """Indices of the softmax-attention layers for a share-based layout."""
    if n_attention <= 0:
        return []
    n_attention = min(n_attention, n_layers)
    if placement == "interleaved":
        return [(i + 1) * n_layers // n_attention - 1 for i in range(n_attention)]
    if placement == "bottom":
        return list(range(n_attention))
    if placement == "top":
        return list(range(n_layers - n_attention, n_layers))
    if placement == "sandwich":
        low = n_attention // 2
        return list(range(low)) + list(range(n_layers - (n_attention - low), n_layers))
    raise ValueError(placement)


def _attention_count(share: float, n_layers: int) -> int:
    """Round the share to a layer count; a positive share keeps at least one layer."""
    n = math.floor(share * n_layers + 0.5)
    return max(n, 1) if share > 0 else 0


def _resolve_pattern(layers: LayersConfig, n_layers: int) -> str:
    """The per-layer letters: `pattern` tiled to the depth, or the share-based layout."""
    if layers.pattern:
        tile = layers.pattern.strip().upper()
        return tile * (n_layers // len(tile)) if n_layers % len(tile) == 0 else tile
    base = LETTER_OF_MIXER.get(layers.mixer, "?")
    if base == "N":
        return "N" * n_layers
    chars = [base] * n_layers
    for i in attention_positions(
        n_layers, _attention_count(layers.attention_share, n_layers), layers.placement
    ):
        chars[i] = "N"
    return "".join(chars)


def _check_layers(layers: LayersConfig, n_layers: int, bad) -> str:
    if layers.pattern is not None:
        tile = layers.pattern.strip().upper()
        if not tile:
            raise bad("bad_pattern", "layers.pattern", "the pattern is empty")
        wrong = sorted(set(tile) - set(MIXER_OF_LETTER))
        if wrong:
            raise bad(
                "bad_pattern",
                "layers.pattern",
                f"{layers.pattern!r} has letters {''.join(wrong)!r}; use N (softmax "
                "attention), L (linear mixer) and M (MCSD)",
            )
        if n_layers % len(tile):
            raise bad(
                "pattern_not_fitting_depth",
                "layers.pattern",
                f"{layers.pattern!r} (length {len(tile)}) does not tile n_layers={n_layers}",
            )
        return tile * (n_layers // len(tile))
    if not 0.0 <= layers.attention_share <= 1.0:
        raise bad(
            "bad_share",
            "layers.attention_share",
            f"must lie in [0, 1], got {layers.attention_share}",
        )
    return _resolve_pattern(layers, n_layers)


# ---- attention --------------------------------------------------------------------------------


def _resolve_attention(a: AttentionConfig, d_model: int, max_seq_len: int) -> AttentionConfig:
    head_dim = a.head_dim or d_model // a.n_heads
    window = a.window if a.window is not None and a.window < max_seq_len else None
    if a.kind == "mla":
        return replace(
            a,
            n_kv_heads=None,
            head_dim=head_dim,
            v_head_dim=a.v_head_dim or head_dim,
            rope_dim=a.rope_dim if a.rope_dim is not None else head_dim // 2,
            window=window,
        )
    n_kv = a.n_kv_heads or {"mha": a.n_heads, "mqa": 1}.get(a.kind, a.n_heads)
    kind = "mha" if n_kv == a.n_heads else "mqa" if n_kv == 1 else "gqa"
    return replace(
        a,
        kind=kind,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        v_head_dim=None,
        kv_rank=None,
        q_rank=None,
        rope_dim=a.rope_dim if a.rope_dim is not None else head_dim,
        window=window,
    )


def _check_mcsd(mcsd: MCSDConfig, d: int, bad) -> None:
    c = mcsd.n_channels
    if c <= 0:
        raise bad("non_positive", "mcsd.n_channels", f"must be positive, got {c}")
    if d % c:
        raise bad(
            "channels_not_dividing_d_model",
            "mcsd.n_channels",
            f"{c} channels do not divide d_model={d}",
        )


def _check_moe(m: MoEConfig, ffn: FFNConfig, bad) -> None:
    if m.n_experts < 0 or m.top_k <= 0 or m.n_shared < 0:
        raise bad("non_positive", "moe", "n_experts and n_shared must be >= 0 and top_k positive")
    if m.n_experts > 0 and m.top_k > m.n_experts:
        raise bad(
            "top_k_above_n_experts",
            "moe.top_k",
            f"top_k={m.top_k} exceeds n_experts={m.n_experts}",
        )
    if m.d_expert is not None and m.d_expert <= 0:
        raise bad("non_positive", "moe.d_expert", f"must be positive, got {m.d_expert}")
    if m.n_experts > 0 and ffn.kind not in FFN_KINDS:
        raise bad(
            "plugin_ffn_in_moe",
            "ffn.kind",
            f"the plugin channel mixer {ffn.kind!r} cannot be an MoE expert; experts "
            f"use the built-in kinds ({', '.join(FFN_KINDS)})",
        )


def _check_attention(a: AttentionConfig, d_model: int, max_seq_len: int, bad) -> None:
    if a.n_heads <= 0:
        raise bad("non_positive", "attention.n_heads", f"must be positive, got {a.n_heads}")
    if a.head_dim is None and d_model % a.n_heads:
        raise bad(
            "heads_not_dividing_d_model",
            "attention.n_heads",
            f"{a.n_heads} heads do not divide d_model={d_model} (or set attention.head_dim)",
        )
    for key in ("head_dim", "v_head_dim", "kv_rank", "q_rank", "window"):
        v = getattr(a, key)
        if v is not None and v <= 0:
            raise bad("non_positive", f"attention.{key}", f"must be positive, got {v}")
    if a.rope_theta <= 0:
        raise bad("non_positive", "attention.rope_theta", f"must be positive, got {a.rope_theta}")
    r = _resolve_attention(a, d_model, max_seq_len)
    if a.kind == "mla":
        _check_mla(a, r, d_model, bad)
    else:
        _check_kv_heads(a, r, bad)


def _check_mla(a: AttentionConfig, r: AttentionConfig, d_model: int, bad) -> None:
    """MLA: its ranks below d_model, its decoupled RoPE dims even and positive (`r`: resolved)."""
    if a.kv_rank is None:
        raise bad("kv_rank_missing", "attention.kv_rank", "MLA needs a kv_rank")
    if a.kv_rank >= d_model:
        raise bad(
            "kv_rank_not_below_d_model",
            "attention.kv_rank",
            f"kv_rank={a.kv_rank} is not below d_model={d_model}",
        )
    if a.q_rank is not None and a.q_rank >= d_model:
        raise bad(
            "q_rank_not_below_d_model",
            "attention.q_rank",
            f"q_rank={a.q_rank} is not below d_model={d_model}",
        )
    if r.rope_dim % 2 or r.rope_dim <= 0:
        raise bad(
            "bad_rope_dim",
            "attention.rope_dim",
            f"the decoupled RoPE dim must be even and positive, got {r.rope_dim}",
        )


def _check_kv_heads(a: AttentionConfig, r: AttentionConfig, bad) -> None:
    """MHA, GQA, MQA: the KV heads the kind asks for, dividing the query heads; the rotary
    dims even and within a head."""
    n_kv = a.n_kv_heads
    if n_kv is not None and n_kv <= 0:
        raise bad("non_positive", "attention.n_kv_heads", f"must be positive, got {n_kv}")
    if a.kind == "mha" and n_kv not in (None, a.n_heads):
        raise bad(
            "kind_kv_heads_mismatch",
            "attention.n_kv_heads",
            f"MHA needs n_kv_heads == n_heads ({a.n_heads}), got {n_kv}",
        )
    if a.kind == "mqa" and n_kv not in (None, 1):
        raise bad(
            "kind_kv_heads_mismatch",
            "attention.n_kv_heads",
            f"MQA needs n_kv_heads == 1, got {n_kv}",
        )
    if a.n_heads % r.n_kv_heads:
        raise bad(
            "kv_heads_not_dividing_heads",
            "attention.n_kv_heads",
            f"n_kv_heads={r.n_kv_heads} does not divide n_heads={a.n_heads}",
        )
    if r.rope_dim % 2 or not 0 <= r.rope_dim <= r.head_dim:
        raise bad(
            "bad_rope_dim",
            "attention.rope_dim",
            f"rotary dims must be even and at most head_dim={r.head_dim}, got {r.rope_dim}",
        )


# ---- linear mixers ----------------------------------------------------------------------------

_DEFAULT_EXPAND = {"mamba2": 2.0}
_DEFAULT_HEAD_DIM = 64  # per-head value size when n_heads is not given


def _resolve_linear(lin: LinearConfig, d_model: int) -> LinearConfig:
    expand = lin.expand if lin.expand is not None else _DEFAULT_EXPAND.get(lin.family, 1.0)
    width = round(expand * d_model)
    n_heads = lin.n_heads or max(1, width // _DEFAULT_HEAD_DIM)
    value_dim = lin.value_dim or width // n_heads
    if lin.key_dim is not None:
        key_dim = lin.key_dim
    elif lin.family == "gla":
        key_dim = max(1, value_dim // 2)
    elif lin.family == "mamba2":
        key_dim = 64
    else:
        key_dim = value_dim
    plugin = lin.family not in LINEAR_FAMILIES  # a plugin may read gate_rank and conv_size
    uses = {
        "feature_map": lin.family == "linear_attention",
        "normalize": lin.family == "linear_attention",
        "gate_rank": plugin or lin.family in ("gla", "rwkv6"),
        "conv_size": plugin or lin.family in ("mamba2", "deltanet", "gated_deltanet"),
    }
    return replace(
        lin,
        n_heads=n_heads,
        key_dim=key_dim,
        value_dim=value_dim,
        expand=float(expand),
        feature_map=(lin.feature_map or "identity") if uses["feature_map"] else None,
        normalize=bool(lin.normalize) if uses["normalize"] else None,
        gate_rank=(lin.gate_rank or 16) if uses["gate_rank"] else None,
        conv_size=(4 if lin.conv_size is None else lin.conv_size) if uses["conv_size"] else None,
    )


def _check_linear(lin: LinearConfig, d_model: int, bad) -> None:
    for key in ("n_heads", "key_dim", "value_dim", "expand"):
        v = getattr(lin, key)
        if v is not None and v <= 0:
            raise bad("non_positive", f"linear.{key}", f"must be positive, got {v}")
    if lin.gate_rank is not None and lin.gate_rank <= 0:
        raise bad("non_positive", "linear.gate_rank", f"must be positive, got {lin.gate_rank}")
    if lin.conv_size is not None and (lin.conv_size < 0 or lin.conv_size == 1):
        raise bad(
            "bad_conv_size",
            "linear.conv_size",
            f"must be 0 (off) or at least 2, got {lin.conv_size}",
        )
    expand = lin.expand if lin.expand is not None else _DEFAULT_EXPAND.get(lin.family, 1.0)
    width = expand * d_model
    if abs(width - round(width)) > 1e-9:
        raise bad(
            "bad_expand",
            "linear.expand",
            f"expand={expand} x d_model={d_model} is not a whole width",
        )
    width = round(width)
    n_heads = lin.n_heads or max(1, width // _DEFAULT_HEAD_DIM)
    if lin.value_dim is None and width % n_heads:
        raise bad(
            "heads_not_dividing_d_model",
            "linear.n_heads",
            f"{n_heads} heads do not divide the value width {width} (expand x d_model)",
        )


def _resolve_ffn(ffn: FFNConfig, d_model: int) -> FFNConfig:
    if ffn.d_ffn is not None:
        return ffn
    if ffn.kind in GATED_FFNS:
        return replace(ffn, d_ffn=64 * math.ceil(8 * d_model / 3 / 64))
    return replace(ffn, d_ffn=4 * d_model)


# ---- typed loading ----------------------------------------------------------------------------
# Hand-written, not an OmegaConf structured merge: OmegaConf would accept "yes" as a boolean, 5
# as a string and "2" as an integer, resolve `${oc.env:...}` in any string, lose the key path of a
# section given as a list, and take ~18x longer (`space.build` loads one ArchConfig per candidate).


@functools.cache
def _type_hints(cls: type) -> dict[str, Any]:
    """`typing.get_type_hints(cls)`, evaluated once per class: under postponed annotations they
    are strings, and evaluating them for every candidate built would be a noticeable share of
    building one."""
    return typing.get_type_hints(cls)


def _load_dataclass(cls: type, data: Any, *, source: str | None, path: str) -> Any:
    """Build dataclass `cls` from a mapping, checking keys and types; errors name the key path."""
    where = path or "(top level)"
    if not isinstance(data, dict):
        raise UserError(f"expected a mapping, got {type(data).__name__}", source=source, key=where)
    hints = _type_hints(cls)
    known = {f.name: f for f in fields(cls)}
    unknown = sorted(set(map(str, data)) - set(known))
    if unknown:
        key = f"{path}.{unknown[0]}" if path else unknown[0]
        raise UserError(
            f"unknown key (known keys here: {', '.join(known)})", source=source, key=key
        )
    kwargs = {}
    for name, f in known.items():
        key = f"{path}.{name}" if path else name
        if name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UserError("missing required key", source=source, key=key)
            continue
        kwargs[name] = _coerce(hints[name], data[name], source=source, key=key)
    return cls(**kwargs)


def _coerce(tp: Any, value: Any, *, source: str | None, key: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(args[0], value, source=source, key=key)
    if dataclasses.is_dataclass(tp):
        if value is None:
            raise UserError("expected a mapping, got null", source=source, key=key)
        return _load_dataclass(tp, value, source=source, path=key)
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise UserError(f"expected a finite number, got {value!r}", source=source, key=key)
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    else:  # pragma: no cover - every field type is listed above
        raise TypeError(tp)
    raise UserError(
        f"expected {_type_name(tp)}, got {type(value).__name__} {value!r}", source=source, key=key
    )


def _type_name(tp: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}[tp]


def _get_path(obj: Any, key: str) -> Any:
    for part in key.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part)
    return obj


# ---- presets ----------------------------------------------------------------------------------


def load_arch(name_or_path: str, *, key: str = "arch") -> ArchConfig:
    """Load a preset from `conf/arch/` by name, or any ArchConfig YAML by path."""
    path = resolve(name_or_path, conf_dir() / "arch", "architecture preset", key)
    arch = ArchConfig.from_yaml(path)
    return arch if arch.name else arch.with_name(path.stem)
