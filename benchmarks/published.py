"""Published tables that compare sequence mixers trained at scale, and the sandbox models that
stand for their rows (`bench_published.py` trains and scores them).

Each table is quoted as published (the numbers, the paper, the table); nothing in archsearch
learns from them. A row names the sandbox architecture built for it: the same layer pattern and
mixer family, at one sandbox size shared by every row of a table (width 64, 4 layers, byte
vocabulary, a dense SwiGLU FFN of width 128), so that a table's rows differ only in what the
paper varied. [Linear-MoE]'s rows are mixture-of-experts models; their stand-ins are dense with
the experts' active width, as one expert layer of eight trains several times slower per token on
a CPU (routing and gathering per expert) than the model's whole mixer. With 4 layers, [DeltaNet]'s
"2 global attention layers" (layers 2 and N/2+1 of 24) become one, at layer 2 (`LNLL`).

Sources: [Linear-MoE] Table 5 (A0.3B-2B, 15B tokens of SlimPajama); [GatedDeltaNet] Table 3 in
the ICLR version, Table 2 in arXiv v1 (1.3B, 100B tokens of FineWeb-Edu) and Table 4 (recall
tasks at 2K tokens); [DeltaNet] Table 2 in arXiv v3 (340M, 15B tokens of SlimPajama; SWDE,
SQuAD and FDA recall).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

WIDTH, DEPTH, HEADS = 64, 4, 2
SEQ_LEN = 128
WINDOW = SEQ_LEN // 2  # the papers' sliding windows cover half their training context


@dataclass(frozen=True)
class Row:
    """One published row: its sandbox architecture (`arch`: a partial ArchConfig dict) and its
    published figures (column -> value)."""

    name: str
    arch: dict[str, Any]
    figures: dict[str, float]


@dataclass(frozen=True)
class Table:
    key: str  # the citation: "[Linear-MoE] Table 5"
    setting: str  # what was trained at scale
    columns: dict[str, bool]  # column -> higher is better
    rows: tuple[Row, ...]
    # qualitative findings the paper's figures state: (column, row a, row b), read as "a is
    # better than b on column" or its opposite, whichever the published figures say
    findings: tuple[tuple[str, str, str], ...] = field(default=())
    lm_column: str = ""  # the column the sandbox's LM loss is held against
    recall_column: str = ""  # the column the probe suite is held against ("" when none)


def arch(pattern: str, family: str = "gla", *, window: int | None = None, moe: bool = False):
    """A sandbox architecture: `pattern` tiled over DEPTH layers of WIDTH (N softmax attention,
    L the linear `family`), SwiGLU FFN of 2 x WIDTH (with `moe`, 8 experts top-2 of WIDTH)."""
    out: dict[str, Any] = {
        "vocab_size": 256,
        "d_model": WIDTH,
        "n_layers": DEPTH,
        "max_seq_len": SEQ_LEN,
        "layers": {"pattern": pattern},
        "ffn": {"kind": "swiglu", "d_ffn": 2 * WIDTH},
    }
    if "N" in pattern:
        out["attention"] = {"kind": "mha", "n_heads": HEADS, "window": window}
    if "L" in pattern:
        out["linear"] = {"family": family, "n_heads": HEADS}
        if family == "linear_attention":  # [Linear-MoE] BLA: no feature map, no output gate
            out["linear"].update(feature_map="identity", output_gate=False)
    if moe:
        out["moe"] = {"n_experts": 8, "top_k": 2, "d_expert": WIDTH}
    return out


MOE = False  # see the module docstring
HYBRID = "LLLN"  # [Linear-MoE] section 3.3: one softmax-attention layer in four
LINEAR_MOE = Table(
    key="[Linear-MoE] Table 5",
    setting="A0.3B-2B MoE models, 12 layers, 15B tokens of SlimPajama (Qwen2 tokenizer)",
    columns={"avg_no_mmlu": True, "avg": True},
    lm_column="avg_no_mmlu",
    rows=(
        Row("Attention", arch("N", moe=MOE), {"avg": 35.53, "avg_no_mmlu": 37.99}),
        Row("BLA", arch("L", "linear_attention", moe=MOE), {"avg": 40.94, "avg_no_mmlu": 43.86}),
        Row("Retention", arch("L", "retnet", moe=MOE), {"avg": 39.60, "avg_no_mmlu": 43.39}),
        Row("GLA", arch("L", "gla", moe=MOE), {"avg": 41.20, "avg_no_mmlu": 44.47}),
        Row("Mamba2", arch("L", "mamba2", moe=MOE), {"avg": 42.45, "avg_no_mmlu": 45.76}),
        Row("HGRN2", arch("L", "hgrn2", moe=MOE), {"avg": 34.24, "avg_no_mmlu": 36.07}),
        Row(
            "BLA (hybrid)",
            arch(HYBRID, "linear_attention", moe=MOE),
            {"avg": 42.31, "avg_no_mmlu": 45.65},
        ),
        Row(
            "Retention (hybrid)",
            arch(HYBRID, "retnet", moe=MOE),
            {"avg": 41.60, "avg_no_mmlu": 45.18},
        ),
        Row("GLA (hybrid)", arch(HYBRID, "gla", moe=MOE), {"avg": 42.94, "avg_no_mmlu": 46.52}),
        Row(
            "Mamba2 (hybrid)",
            arch(HYBRID, "mamba2", moe=MOE),
            {"avg": 42.70, "avg_no_mmlu": 46.31},
        ),
        Row("HGRN2 (hybrid)", arch(HYBRID, "hgrn2", moe=MOE), {"avg": 41.99, "avg_no_mmlu": 45.75}),
    ),
    findings=tuple(
        ("avg_no_mmlu", f"{f} (hybrid)", f) for f in ("BLA", "Retention", "GLA", "Mamba2", "HGRN2")
    )
    + tuple(
        ("avg_no_mmlu", f, "Attention") for f in ("BLA", "Retention", "GLA", "Mamba2", "HGRN2")
    ),
)

GATED_DELTANET = Table(
    key="[GatedDeltaNet] Table 3",
    setting="1.3B dense models, 100B tokens of FineWeb-Edu (Llama 2 tokenizer), 4K context",
    columns={"wiki_ppl": False, "lmb_ppl": False, "recall_avg": True},
    lm_column="wiki_ppl",
    recall_column="recall_avg",
    rows=(
        Row(
            "RetNet", arch("L", "retnet"), {"wiki_ppl": 19.08, "lmb_ppl": 17.27, "recall_avg": 22.9}
        ),
        Row("HGRN2", arch("L", "hgrn2"), {"wiki_ppl": 19.10, "lmb_ppl": 17.69, "recall_avg": 20.1}),
        Row(
            "Mamba2", arch("L", "mamba2"), {"wiki_ppl": 16.56, "lmb_ppl": 12.56, "recall_avg": 29.8}
        ),
        Row(
            "DeltaNet",
            arch("L", "deltanet"),
            {"wiki_ppl": 17.71, "lmb_ppl": 16.88, "recall_avg": 26.2},
        ),
        Row(
            "Gated DeltaNet",
            arch("L", "gated_deltanet"),
            {"wiki_ppl": 16.42, "lmb_ppl": 12.17, "recall_avg": 30.6},
        ),
        Row("Transformer++", arch("N"), {"wiki_ppl": 18.53, "lmb_ppl": 18.32, "recall_avg": 37.0}),
        Row(
            "Gated DeltaNet-H1",
            arch("LN", "gated_deltanet", window=WINDOW),
            {"wiki_ppl": 16.07, "lmb_ppl": 12.12, "recall_avg": 39.0},
        ),
    ),
    findings=(
        ("wiki_ppl", "Gated DeltaNet", "Mamba2"),
        ("wiki_ppl", "Gated DeltaNet", "DeltaNet"),
        ("wiki_ppl", "Gated DeltaNet-H1", "Gated DeltaNet"),
        *(("wiki_ppl", f, "Transformer++") for f in ("RetNet", "HGRN2", "Mamba2", "DeltaNet")),
        ("recall_avg", "Gated DeltaNet-H1", "Gated DeltaNet"),
        ("recall_avg", "Transformer++", "Gated DeltaNet"),
    ),
)

DELTANET = Table(
    key="[DeltaNet] Table 2",
    setting="340M dense models, 15B tokens of SlimPajama (Mistral tokenizer)",
    columns={"wiki_ppl": False, "lmb_ppl": False, "recall_avg": True},
    lm_column="wiki_ppl",
    recall_column="recall_avg",
    rows=(
        Row(
            "Transformer++",
            arch("N"),
            {"wiki_ppl": 28.39, "lmb_ppl": 42.69, "recall_avg": (42.2 + 22.1 + 21.4) / 3},
        ),
        Row(
            "RetNet",
            arch("L", "retnet"),
            {"wiki_ppl": 32.33, "lmb_ppl": 49.19, "recall_avg": (13.3 + 27.6 + 2.9) / 3},
        ),
        Row(
            "GLA",
            arch("L", "gla"),
            {"wiki_ppl": 28.65, "lmb_ppl": 43.35, "recall_avg": (18.6 + 27.2 + 8.1) / 3},
        ),
        Row(
            "DeltaNet",
            arch("L", "deltanet"),
            {"wiki_ppl": 28.24, "lmb_ppl": 37.37, "recall_avg": (26.4 + 28.9 + 12.8) / 3},
        ),
        Row(
            "DeltaNet + sliding attention",
            arch("LN", "deltanet", window=WINDOW),
            {"wiki_ppl": 27.06, "lmb_ppl": 38.17, "recall_avg": (39.3 + 32.5 + 18.8) / 3},
        ),
        Row(
            "DeltaNet + 2 global attention layers",
            arch("LNLL", "deltanet"),  # the paper's layer 2 (its N/2+1 falls on 3 of 4 here)
            {"wiki_ppl": 27.51, "lmb_ppl": 35.04, "recall_avg": (42.9 + 32.1 + 23.1) / 3},
        ),
    ),
    findings=(
        *(("wiki_ppl", f, "Transformer++") for f in ("RetNet", "GLA", "DeltaNet")),
        ("wiki_ppl", "DeltaNet + sliding attention", "DeltaNet"),
        ("wiki_ppl", "DeltaNet + 2 global attention layers", "DeltaNet"),
        ("recall_avg", "DeltaNet + sliding attention", "DeltaNet"),
        ("recall_avg", "DeltaNet + 2 global attention layers", "DeltaNet"),
        ("recall_avg", "Transformer++", "DeltaNet"),
    ),
)

TABLES = {"linear_moe": LINEAR_MOE, "gated_deltanet": GATED_DELTANET, "deltanet": DELTANET}
