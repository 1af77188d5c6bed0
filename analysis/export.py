"""Take a trial to a full training run: its architecture as an ArchConfig preset (YAML that
`archsearch train arch=<file>` reads), and a Hugging Face-style `config.json` where the mixer
maps to a known model type.

The mapping is stated field by field. A model type is chosen from the layer pattern:

- softmax attention only: `llama` (MHA/GQA/MQA with a gated FFN; `mistral` with a sliding
  window; `mixtral` with MoE), `deepseek_v2` for MLA ([PLM] section 2 uses the same latent
  KV design: `kv_lora_rank`, `qk_rope_head_dim`, ...);
- linear mixers, pure or hybrid with softmax attention: the flash-linear-attention (fla) model
  types (`gla`, `retnet`, `delta_net`, `gated_deltanet`, `hgrn2`, `rwkv6`, `linear_attn`), whose
  `attn` entry lists the softmax-attention layers of a hybrid; `mamba2` (transformers);
- the MCSD block has no Hugging Face model type: no config.json is written.

Whatever the target cannot express is listed under `unmapped` (in config.json itself, key
`archsearch_unmapped`, and on the console), so an approximate config is never mistaken for an
exact one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from archsearch.arch import ArchConfig
from archsearch.errors import UserError

RECIPE_SUFFIX = ".train.yaml"  # beside an exported preset: the trial's training recipe

FLA_TYPES = {
    "gla": "gla",
    "retnet": "retnet",
    "deltanet": "delta_net",
    "gated_deltanet": "gated_deltanet",
    "hgrn2": "hgrn2",
    "rwkv6": "rwkv6",
    "linear_attention": "linear_attn",
}
GATED_ACT = {"swiglu": "silu", "geglu": "gelu"}  # HF gated MLPs: down(act(gate x) * up x)


@dataclass
class HFConfig:
    """A config.json (None when nothing maps), how each field maps, and what does not."""

    model_type: str | None
    library: str = ""
    config: dict[str, Any] | None = None
    fields: list[tuple[str, str, Any]] = field(default_factory=list)  # (ours, theirs, value)
    unmapped: list[tuple[str, str]] = field(default_factory=list)  # (ours, why)

    @property
    def exact(self) -> bool:
        return self.config is not None and not self.unmapped

    def set(self, ours: str, theirs: str, value: Any) -> None:
        assert self.config is not None
        self.config[theirs] = value
        self.fields.append((ours, theirs, value))

    def lacks(self, ours: str, why: str) -> None:
        self.unmapped.append((ours, why))

    def to_json(self) -> dict[str, Any]:
        assert self.config is not None
        return {
            **self.config,
            "archsearch_exact": self.exact,
            "archsearch_unmapped": {k: v for k, v in self.unmapped},
        }


def hf_config(arch: ArchConfig) -> HFConfig:
    """The Hugging Face-style config of an architecture (see the module docstring)."""
    r = arch.resolved()
    letters = set(r.pattern)
    if "M" in letters:
        out = HFConfig(None)
        out.lacks("layers", "the MCSD block has no Hugging Face model type")
        return out
    if "L" in letters and r.linear.family not in FLA_TYPES and r.linear.family != "mamba2":
        out = HFConfig(None)
        out.lacks("linear.family", f"the plugin mixer {r.linear.family} has no Hugging Face type")
        return out
    if letters == {"N"}:
        return _mla(r) if r.attention.kind == "mla" else _llama_like(r)
    if r.linear.family == "mamba2":
        return _mamba2(r)
    return _fla(r)


def _common(out: HFConfig, r: ArchConfig, eps_key: str) -> None:
    out.set("vocab_size", "vocab_size", r.vocab_size)
    out.set("d_model", "hidden_size", r.d_model)
    out.set("n_layers", "num_hidden_layers", r.n_layers)
    out.set("max_seq_len", "max_position_embeddings", r.max_seq_len)
    out.set("tie_embeddings", "tie_word_embeddings", r.tie_embeddings)
    out.set("norm_eps", eps_key, r.norm_eps)
    if r.norm != "rmsnorm":
        out.lacks("norm", f"{r.norm}: the target uses RMSNorm")


def _rope(out: HFConfig, theta: float) -> None:
    # transformers 5 reads rope_parameters; 4.x reads rope_theta
    out.set("attention.rope_theta", "rope_theta", theta)
    out.config["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}


def _gated_ffn(out: HFConfig, r: ArchConfig, size_key: str = "intermediate_size") -> None:
    if r.ffn.kind in GATED_ACT:
        out.set("ffn.kind", "hidden_act", GATED_ACT[r.ffn.kind])
    else:
        out.set("ffn.kind", "hidden_act", "silu")
        out.lacks("ffn.kind", f"{r.ffn.kind} is not gated; the target's MLP is (gate * up)")
    if r.ffn.d_ffn is not None:
        out.set("ffn.d_ffn", size_key, r.ffn.d_ffn)


def _llama_like(r: ArchConfig) -> HFConfig:
    a = r.attention
    kind = "mixtral" if r.moe is not None else "mistral" if a.window else "llama"
    out = HFConfig(kind, "transformers", {"model_type": kind})
    out.config["architectures"] = [
        {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM"}.get(
            kind, "MixtralForCausalLM"
        )
    ]
    _common(out, r, "rms_norm_eps")
    out.set("attention.n_heads", "num_attention_heads", a.n_heads)
    out.set("attention.n_kv_heads", "num_key_value_heads", a.n_kv_heads)
    out.set("attention.head_dim", "head_dim", a.head_dim)
    _rope(out, a.rope_theta)
    if a.rope_dim != a.head_dim:
        out.lacks("attention.rope_dim", f"{a.rope_dim} of {a.head_dim} dims rotated (partial)")
    if a.window:
        out.set("attention.window", "sliding_window", a.window)
    if kind != "mixtral":
        out.config.update(attention_bias=False, mlp_bias=False)
    if r.moe is None:
        _gated_ffn(out, r)
    else:
        m = r.moe
        out.set("moe.n_experts", "num_local_experts", m.n_experts)
        out.set("moe.top_k", "num_experts_per_tok", m.top_k)
        out.set("moe.d_expert", "intermediate_size", m.d_expert)
        out.set("moe.aux_loss_coef", "router_aux_loss_coef", m.aux_loss_coef)
        _gated_ffn(out, r, size_key="intermediate_size")
        out.lacks("moe.routing", "mixtral renormalises the top-k gate weights; archsearch does not")
        if m.n_shared:
            out.lacks("moe.n_shared", f"{m.n_shared} shared experts: mixtral has none")
    return out


def _mla(r: ArchConfig) -> HFConfig:
    a = r.attention
    out = HFConfig(
        "deepseek_v2",
        "transformers",
        {"model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"]},
    )
    _common(out, r, "rms_norm_eps")
    out.set("attention.n_heads", "num_attention_heads", a.n_heads)
    out.config["num_key_value_heads"] = a.n_heads
    out.set("attention.head_dim", "qk_nope_head_dim", a.head_dim)
    out.set("attention.rope_dim", "qk_rope_head_dim", a.rope_dim)
    out.set("attention.v_head_dim", "v_head_dim", a.v_head_dim)
    out.set("attention.kv_rank", "kv_lora_rank", a.kv_rank)
    out.set("attention.q_rank", "q_lora_rank", a.q_rank)
    out.config["head_dim"] = a.rope_dim
    out.config["attention_bias"] = False
    _rope(out, a.rope_theta)
    if a.window:
        out.lacks("attention.window", "deepseek_v2 has no sliding window")
    _gated_ffn(out, r)
    if r.moe is None:
        # every layer dense: no layer index reaches first_k_dense_replace
        out.config.update(first_k_dense_replace=r.n_layers, n_routed_experts=1, n_shared_experts=0)
        return out
    m = r.moe
    out.set("moe.n_experts", "n_routed_experts", m.n_experts)
    out.set("moe.top_k", "num_experts_per_tok", m.top_k)
    out.set("moe.n_shared", "n_shared_experts", m.n_shared)
    out.set("moe.d_expert", "moe_intermediate_size", m.d_expert)
    out.config.update(
        first_k_dense_replace=0,
        topk_method="greedy",
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
        n_group=1,
        topk_group=1,
        intermediate_size=m.d_expert,
    )
    out.lacks("moe.aux_loss_coef", "deepseek_v2 configures its balance losses differently")
    return out


def _linear_shapes(out: HFConfig, r: ArchConfig) -> None:
    lin = r.linear
    out.set("linear.n_heads", "num_heads", lin.n_heads)
    out.set("linear.key_dim", "expand_k", lin.key_dim * lin.n_heads / r.d_model)
    out.set("linear.value_dim", "expand_v", lin.value_dim * lin.n_heads / r.d_model)


def _hybrid_attention(out: HFConfig, r: ArchConfig) -> None:
    idx = [i for i, c in enumerate(r.pattern) if c == "N"]
    if not idx:
        return
    a = r.attention
    if a.kind == "mla":
        out.lacks("attention.kind", "fla's hybrid `attn` layers are GQA, not MLA")
        return
    attn = {
        "layers": idx,
        "num_heads": a.n_heads,
        "num_kv_heads": a.n_kv_heads,
        "qkv_bias": False,
        "window_size": a.window,
        "rope_theta": a.rope_theta,
    }
    out.set("layers.pattern", "attn", attn)
    if a.head_dim * a.n_heads != r.d_model:
        out.lacks("attention.head_dim", "fla's attention layers use hidden_size / num_heads")
    if a.rope_dim != a.head_dim:
        out.lacks("attention.rope_dim", "partial rotary dims")


def _fla(r: ArchConfig) -> HFConfig:
    kind = FLA_TYPES[r.linear.family]
    out = HFConfig(kind, "flash-linear-attention (fla)", {"model_type": kind})
    _common(out, r, "norm_eps")
    _linear_shapes(out, r)
    lin = r.linear
    if lin.conv_size is not None:
        out.set("linear.conv_size", "use_short_conv", lin.conv_size > 0)
        if lin.conv_size > 0:
            out.set("linear.conv_size", "conv_size", lin.conv_size)
    if r.linear.family == "gla":
        out.set("linear.output_gate", "use_output_gate", lin.output_gate)
    if lin.feature_map is not None:
        out.set("linear.feature_map", "feature_map", lin.feature_map)
    _gated_ffn(out, r)
    if r.ffn.kind == "swiglu":
        out.config["hidden_act"] = "swish"
    _hybrid_attention(out, r)
    if r.moe is not None:
        out.lacks("moe", "fla's models have a dense MLP (use Linear-MoE for MoE)")
    out.lacks(
        "linear",
        "fla's layer internals (gate ranks, output norms, q/k activations) follow its own "
        "defaults; the shapes above are mapped",
    )
    return out


def _mamba2(r: ArchConfig) -> HFConfig:
    lin = r.linear
    out = HFConfig(
        "mamba2", "transformers", {"model_type": "mamba2", "architectures": ["Mamba2ForCausalLM"]}
    )
    _common(out, r, "layer_norm_epsilon")
    out.set("linear.n_heads", "num_heads", lin.n_heads)
    out.set("linear.value_dim", "head_dim", lin.value_dim)
    out.set("linear.key_dim", "state_size", lin.key_dim)
    out.set("linear.expand", "expand", lin.expand)
    out.set("linear.conv_size", "conv_kernel", lin.conv_size or 1)
    out.config.update(n_groups=1, use_bias=False, use_conv_bias=True)
    out.lacks("ffn", "transformers' Mamba2 blocks have no channel mixer (FFN)")
    if "N" in r.pattern:
        out.lacks("layers.pattern", "transformers' Mamba2 has no softmax-attention layers")
    if r.moe is not None:
        out.lacks("moe", "no MoE in Mamba2")
    return out


def recipe_path(preset: Path) -> Path:
    """Where the training recipe of an exported preset lives (`NAME.yaml` -> `NAME.train.yaml`)."""
    return preset.with_name(preset.name.removesuffix(".yaml") + RECIPE_SUFFIX)


def recipe_text(train: dict[str, Any], header: list[str]) -> str:
    """The sweep's training settings, complete (every `TrainConfig` key), as the recipe file
    beside an exported preset: `archsearch train arch=<preset>` reads them, so it trains the
    trial as the sweep did."""
    import yaml

    from archsearch.trainers.config import TrainConfig

    settings = TrainConfig.from_dict(train).to_dict()
    body = yaml.safe_dump(settings, sort_keys=False, default_flow_style=None)
    return "\n".join(header) + "\n" + body


def write_files(folder: Path, files: dict[Path, str], *, overwrite: bool = False) -> list[Path]:
    """Write an export's files (path -> text) into `folder`, all or none; returns those
    written (a file already holding the same text is left as it is).

    Checked before anything is written: every path lies in `folder` through real folders, and
    none is a symbolic link (never followed, even with `overwrite`) or a folder; a file that
    exists and holds other text (edited by its user since) is kept unless `overwrite`. Each
    file is written to a temporary name beside it and renamed over the target, so a reader
    never sees half of one."""
    root = folder.absolute()
    files = {path.absolute(): text for path, text in files.items()}
    changed = []
    for path, text in files.items():
        _check_inside(root, path)
        if path.is_dir():
            raise UserError(f"{str(path)!r} is a folder, not a file it could write", key="out")
        if path.is_file():
            if path.read_bytes() == text.encode():
                continue
            if not overwrite:
                raise UserError(
                    f"{str(path)!r} exists and differs from what this export writes (edited "
                    "since?): it is kept; give overwrite=true to replace it, or name= / out= "
                    "for another",
                    key="out",
                )
        changed.append(path)
    for path in changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        _replace(path, files[path])
    return changed


def _check_inside(root: Path, path: Path) -> None:
    """`path` lies in `root` without passing a symbolic link or a file on the way."""
    if root not in path.parents:
        raise UserError(f"{str(path)!r} lies outside the export folder {str(root)!r}", key="out")
    for part in [path, *path.parents[: len(path.parents) - len(root.parents) - 1]]:
        if part.is_symlink():
            raise UserError(
                f"{str(part)!r} is a symbolic link: an export never writes through a link "
                "(remove it, or give out= another folder)",
                key="out",
            )
        if part != path and part.exists() and not part.is_dir():
            raise UserError(
                f"{str(part)!r} is a file, not the folder it would write into", key="out"
            )


def _replace(path: Path, text: str) -> None:
    import os
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
