"""Write a trial's loss curve into its run directory: `curve.json`, `curve.csv`, `curve.png`."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from archsearch.trainers.trial import TrialResult


def write_curves(result: TrialResult, run_dir: str | Path) -> dict[str, Path]:
    """The training loss every `log_every` steps and the validation points, as JSON, CSV and a
    PNG plot (loss against training tokens). Returns the paths written."""
    run_dir = Path(run_dir)
    paths = {ext: run_dir / f"curve.{ext}" for ext in ("json", "csv", "png")}
    train = [{"step": s, "tokens": t, "train_loss": loss} for s, t, loss in result.curve]
    paths["json"].write_text(
        json.dumps(
            {
                "arch": result.arch_name,
                "budget": result.budget,
                "train": train,
                "eval": result.evals,
            },
            indent=1,
        )
    )
    val_at = {e["step"]: e["val_loss"] for e in result.evals}
    with paths["csv"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "tokens", "train_loss", "val_loss"])
        rows = {s: [s, t, loss, val_at.get(s, "")] for s, t, loss in result.curve}
        for e in result.evals:  # an eval point between two log points gets its own row
            rows.setdefault(e["step"], [e["step"], e["tokens"], "", e["val_loss"]])
        w.writerows(rows[s] for s in sorted(rows))
    _plot(result, paths["png"])
    return paths


def _plot(result: TrialResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=120)
    if result.curve:
        ax.plot([c[1] for c in result.curve], [c[2] for c in result.curve], label="train", lw=1.2)
    if result.evals:
        ax.plot(
            [e["tokens"] for e in result.evals],
            [e["val_loss"] for e in result.evals],
            "o-",
            label="validation",
            lw=1.2,
        )
    for task, p in result.probes.items():
        ax.plot([], [], " ", label=f"{task}: acc {p['acc']:.3f}")
    ax.set_xlabel("training tokens")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(f"{result.arch_name or 'trial'} ({result.budget}, {result.status})")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
