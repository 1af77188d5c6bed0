"""Sandbox pretraining trials (`archsearch.trainers`): short, fair, reproducible training runs
that give every candidate architecture its loss (or probe accuracy) for the Pareto front.

- `trial`: `run_trial(arch, TrainConfig(...), run_dir=...) -> TrialResult` (the heart)
- `config`: `TrainConfig` and the budget syntax (`tokens:2M`, `flops:1e13`, `time:60s`, ...)
- `data`: the embedded stdlib corpus, text files, Hugging Face datasets; memory-mapped tokens
- `tokenizer`: byte (default), char, locally trained BPE
- `probes`: [MAD] / [Zoology]-style synthetic tasks (recall, noisy_recall, fuzzy_recall,
  selective_copy, compression, memorization)
- `schedule`: warmup + cosine, WSD, WSDC ([PLM] section 4.2)
- `checkpoint`, `curves`: atomic checkpoints and results; loss-curve JSON/CSV/PNG

Importing this package does not import torch; `trial` does.
"""

from archsearch.trainers.config import Budget, TrainConfig, parse_budget

__all__ = ["Budget", "TrainConfig", "TrialResult", "parse_budget", "run_trial"]


def __getattr__(name: str):
    if name in ("run_trial", "TrialResult"):
        from archsearch.trainers import trial

        return getattr(trial, name)
    raise AttributeError(name)
