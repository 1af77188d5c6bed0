"""How far a sandbox study's answer holds at a larger budget: the figures of its
confirmations (`archsearch confirm`, `archsearch.sweep.retrain`).

For one confirmation (a budget factor, a corpus and a seed), over the trials it confirmed:
- Kendall tau and Spearman rho (`scipy.stats`) between the sandbox and the confirmed training
  objective: does the ranking hold?
- how many sandbox-front members stay on the confirmed front, the front of the confirmed
  trials on their confirmed training objective and their unchanged cost objectives;
- the extrapolation error: each sandbox curve's prediction of the confirmed validation loss
  (`archsearch.trainers.extrapolate.predict_loss`) against the loss measured, as the mean
  absolute percentage error and the share within the predicted +-2 sigma (not measured when
  the confirmation trained on another corpus: the curve says nothing about it), also with the
  law's shape refitted on the study and corrected across architectures by the other
  confirmations (`archsearch.trainers.transfer`), each leave-one-out;
- a plot of sandbox against confirmed loss, front members marked (PNG and plotly HTML), and
  the report's and dashboard's section.

`correct_predicted_axes` gives a front's axis `val_loss[tokens=X]` at a confirmed budget from
the confirmations (measured where confirmed, the corrected prediction elsewhere).
"""

from __future__ import annotations

import html
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from archsearch.analysis.front import Axis, axis_title, candidates, non_dominated
from archsearch.errors import UserError
from archsearch.study import Status, StudyData, TrialRecord
from archsearch.sweep.retrain import training_index

__all__ = [
    "COLUMNS",
    "Confirmation",
    "ConfirmedTrial",
    "confirm_figure",
    "confirm_mpl",
    "confirmations",
    "correct_predicted_axes",
    "html_section",
    "markdown_section",
    "panel",
    "table_rows",
    "write_confirm_outputs",
]

SECTION = "Confirmation at a larger budget"
SHAPE_RUNS = 400  # sandbox curves read to fit the law's shape on a study


@dataclass
class ConfirmedTrial:
    """A sandbox trial and its confirmation."""

    trial: int  # the sandbox trial
    confirmation: int  # the confirmation's trial number
    summary: str
    sandbox: float  # the training objective at the sandbox budget
    confirmed: float  # ... at the confirmation's budget
    on_sandbox_front: bool
    on_confirmed_front: bool
    val_loss: float | None = None  # the confirmation's validation loss (nats/token)
    predicted: float | None = None  # extrapolated from the sandbox curve (nats/token)
    predicted_std: float | None = None
    law: str = ""
    not_predicted: str = ""  # why there is no prediction


@dataclass
class Confirmation:
    """One confirmation of a study: its settings, its trials and its figures."""

    study: str
    objective: str  # the training objective compared (the study's first)
    direction: str
    budget_factor: float
    budget: str  # the confirmation's budget
    data: list[str]
    seed: int
    same_corpus: bool
    trials: list[ConfirmedTrial] = field(default_factory=list)
    failed: dict[int, str] = field(default_factory=dict)  # sandbox trial -> reason
    kendall_tau: float | None = None
    kendall_p: float | None = None
    spearman: float | None = None
    spearman_p: float | None = None
    front_members: int = 0  # confirmed trials on the sandbox front
    front_kept: int = 0  # ... of them on the confirmed front
    mape_pct: float | None = None  # extrapolation: mean absolute percentage error
    within_2sigma: float | None = None  # extrapolation: share within the predicted +-2 sigma
    predicted: int = 0  # confirmed trials with a prediction
    # the same, with the law's shape fitted on this study (its sandbox curves and its other
    # confirmations: each confirmed trial predicted leave-one-out)
    calibrated_mape_pct: float | None = None
    calibrated_within_2sigma: float | None = None
    # the same, corrected across architectures by the other confirmations (`transfer`)
    corrected: int = 0  # confirmed trials predicted so
    corrected_mape_pct: float | None = None
    corrected_within_2sigma: float | None = None

    @property
    def key(self) -> tuple:
        return (self.budget_factor, tuple(self.data), self.seed)

    def facts(self) -> list[tuple[str, str]]:
        """(name, text) pairs: the figures as the table, report and dashboard state them."""
        n = len(self.trials)
        out = [
            (
                "budget",
                f"{self.budget_factor:g}x the sandbox budget ({self.budget}), seed "
                f"{self.seed}, corpus {', '.join(self.data)}",
            ),
            ("confirmed", f"{n} trials" + (f" ({len(self.failed)} failed)" if self.failed else "")),
            ("Kendall tau", _corr(self.kendall_tau, self.kendall_p, n)),
            ("Spearman rho", _corr(self.spearman, self.spearman_p, n)),
            (
                "front kept",
                f"{self.front_kept} of {self.front_members} sandbox-front members stay "
                "on the confirmed front",
            ),
        ]
        if not self.same_corpus:
            extrapolation = "not measured: the confirmation trained on another corpus"
        elif self.mape_pct is None:
            reasons = sorted({t.not_predicted for t in self.trials if t.not_predicted})
            extrapolation = "no prediction" + (f" ({'; '.join(reasons)})" if reasons else "")
        else:
            extrapolation = (
                f"MAPE {self.mape_pct:.2f}% over {self.predicted} trials, "
                f"{self.within_2sigma:.0%} within the predicted +-2 sigma (prior shape)"
            )
            if self.calibrated_mape_pct is not None:
                extrapolation += (
                    f"; shape fitted on this study, leave-one-out: MAPE "
                    f"{self.calibrated_mape_pct:.2f}%, {self.calibrated_within_2sigma:.0%} "
                    "within +-2 sigma"
                )
            if self.corrected_mape_pct is not None:
                extrapolation += (
                    f"; corrected across architectures by the other confirmations: MAPE "
                    f"{self.corrected_mape_pct:.2f}% over {self.corrected} trials, "
                    f"{self.corrected_within_2sigma:.0%} within +-2 sigma"
                )
        out.append(("extrapolation", extrapolation))
        return out

    def summary(self) -> dict[str, Any]:
        """Plain data (`format=json`)."""
        out = {k: v for k, v in asdict(self).items() if k != "trials"}
        out["failed"] = {str(k): v for k, v in self.failed.items()}
        out["trials"] = [asdict(t) for t in self.trials]
        out["facts"] = dict(self.facts())
        return out


def _corpus(train: dict[str, Any]) -> list[str]:
    """The corpora a stored training config names (the embedded one when it names none)."""
    data = train.get("data") or ["stdlib"]
    return [data] if isinstance(data, str) else list(data)


def _corr(value: float | None, p: float | None, n: int) -> str:
    if value is None:
        return f"not defined over {n} trials (needs 2 or more, not all equal)"
    return f"{value:.3f} ({f'p = {p:.2g}' if p is not None else 'no p-value'}, {n} trials)"


def _finite(x: Any) -> float | None:
    return float(x) if x is not None and math.isfinite(float(x)) else None


def confirmations(data: StudyData) -> list[Confirmation]:
    """Every confirmation stored in the study (one per budget factor, corpus and seed), in the
    order of their factors."""
    index = training_index(data.objectives)
    groups: dict[tuple, list[TrialRecord]] = {}
    for r in data.records:
        if "confirms" in r.attrs and r.status in (Status.CONFIRMATION, Status.FAILED):
            train = r.attrs.get("confirm_train") or {}
            key = (
                float(r.attrs["budget_factor"]),
                tuple(train.get("data") or ()),
                int(r.attrs["seed"]),
            )
            groups.setdefault(key, []).append(r)
    if index is None or not groups:
        return []
    return [_one(data, index, key, recs) for key, recs in sorted(groups.items())]


def _one(data: StudyData, index: int, key: tuple, recs: list[TrialRecord]) -> Confirmation:
    factor, corpus, seed = key
    by_number = {r.number: r for r in data.records}
    sandbox_train = dict(data.meta.get("train") or {})
    first = recs[0].attrs.get("confirm_train") or {}
    c = Confirmation(
        study=data.name,
        objective=data.objectives[index],
        direction=data.directions[index],
        budget_factor=factor,
        budget=str(first.get("budget", "")),
        data=list(corpus),
        seed=seed,
        same_corpus=list(corpus) == _corpus(sandbox_train),
    )
    axes = [Axis(label, d) for label, d in zip(data.objectives, data.directions)]
    pool = candidates(data.records)
    sandbox_front = set()
    if pool:
        mask = non_dominated(np.array([r.values for r in pool], dtype=float), axes)
        sandbox_front = {r.number for r, m in zip(pool, mask) if m}
    done: dict[int, TrialRecord] = {}
    for r in sorted(recs, key=lambda r: r.number):
        source = int(r.attrs["confirms"])
        if r.status == Status.FAILED:
            c.failed.setdefault(source, r.reason)
        elif source not in done and source in by_number and by_number[source].values:
            done[source] = r
            c.failed.pop(source, None)
    if not done:
        return c
    sources = sorted(done)
    confirmed_values = np.array([done[s].attrs["confirm_values"] for s in sources], dtype=float)
    confirmed_front = non_dominated(confirmed_values, axes)
    for s, on_front in zip(sources, confirmed_front):
        r = done[s]
        c.trials.append(
            ConfirmedTrial(
                trial=s,
                confirmation=r.number,
                summary=str(r.attrs.get("summary", "")),
                sandbox=float(by_number[s].values[index]),
                confirmed=float(r.attrs["confirm_values"][index]),
                on_sandbox_front=s in sandbox_front,
                on_confirmed_front=bool(on_front),
                val_loss=_finite((r.attrs.get("metrics") or {}).get("val_loss")),
            )
        )
    _rank_figures(c)
    c.front_members = sum(t.on_sandbox_front for t in c.trials)
    c.front_kept = sum(t.on_sandbox_front and t.on_confirmed_front for t in c.trials)
    if c.same_corpus:
        _extrapolate(data, c, sandbox_train)
    return c


def _rank_figures(c: Confirmation) -> None:
    from scipy import stats

    x = [t.sandbox for t in c.trials]
    y = [t.confirmed for t in c.trials]
    if len(x) < 2 or len(set(x)) < 2 or len(set(y)) < 2:
        return
    tau = stats.kendalltau(x, y)
    rho = stats.spearmanr(x, y)
    c.kendall_tau, c.kendall_p = _finite(tau.statistic), _finite(tau.pvalue)
    c.spearman, c.spearman_p = _finite(rho.statistic), _finite(rho.pvalue)


def _extrapolate(data: StudyData, c: Confirmation, train: dict[str, Any]) -> None:
    """Each sandbox curve's predicted loss at the confirmation's budget, against the loss the
    confirmation measured."""
    from archsearch.trainers.extrapolate import predict_loss

    curves = data.curves([t.trial for t in c.trials])
    params = {r.number: r.attrs.get("params") for r in data.records}  # the law's size term
    errors, within = [], []
    for t in c.trials:
        if t.val_loss is None:
            t.not_predicted = "the confirmation has no validation loss"
            continue
        curve = curves.get(t.trial)
        if not curve:
            t.not_predicted = "the sandbox trial stored no curve"
            continue
        try:
            pred = predict_loss(curve, train, c.budget, params=params.get(t.trial))
        except ValueError as err:
            t.not_predicted = f"the curve could not be fitted ({err})"
            continue
        t.predicted, t.predicted_std, t.law = float(pred.value), float(pred.std), pred.law
        errors.append(abs(pred.value - t.val_loss) / t.val_loss * 100.0)
        within.append(abs(pred.value - t.val_loss) <= 2.0 * pred.std)
    if errors:
        c.predicted = len(errors)
        c.mape_pct = float(np.mean(errors))
        c.within_2sigma = float(np.mean(within))
        _calibrated(data, c, train, curves, params)


def _calibrated(
    data: StudyData, c: Confirmation, train: dict[str, Any], curves, params: dict[int, Any]
) -> None:
    """Leave-one-out: the law's shape fitted on every trained sandbox curve of the study and
    the curves of the other confirmed trials, then each confirmed trial predicted from its
    sandbox curve alone (what a user gets for the architectures not confirmed); and the same
    prediction corrected across architectures by the other confirmations
    (`archsearch.trainers.transfer`)."""
    from archsearch.trainers.extrapolate import fit_shape, predict_loss
    from archsearch.trainers.transfer import UnseenMixer, fit_transfer

    trained = [r.number for r in candidates(data.records) if r.number not in curves]
    curves = {**curves, **data.curves(trained[:SHAPE_RUNS])}
    done = [t for t in c.trials if t.predicted is not None]
    sandbox_runs, confirm_runs = _runs(
        data, curves, train, c.budget, {t.trial: t.confirmation for t in done}, params
    )
    if len(confirm_runs) < 2:
        return
    wanted = {t.trial for t in done}
    traits = _traits([r for r in data.records if r.number in wanted])
    errors, within, corrected, corrected_within = [], [], [], []
    for t in done:
        others = {k: run for k, run in confirm_runs.items() if k != t.trial}
        try:
            shape = fit_shape(sandbox_runs + list(others.values()))
            law = {
                u.trial: predict_loss(
                    curves[u.trial], train, c.budget, shape=shape, params=params.get(u.trial)
                )
                for u in done
                if u.trial == t.trial or u.trial in others
            }
        except ValueError:
            continue
        pred = law[t.trial]
        errors.append(abs(pred.value - t.val_loss) / t.val_loss * 100.0)
        within.append(abs(pred.value - t.val_loss) <= 2.0 * pred.std)
        examples = _examples(
            [(u.trial, law[u.trial].value, u.val_loss) for u in done if u.trial in others],
            traits,
        )
        if t.trial not in traits:
            continue
        try:
            got = fit_transfer(examples).predict(traits[t.trial], pred.value)
        except (UnseenMixer, ValueError):
            continue
        corrected.append(abs(got.value - t.val_loss) / t.val_loss * 100.0)
        corrected_within.append(abs(got.value - t.val_loss) <= 2.0 * got.std)
    if errors:
        c.calibrated_mape_pct = float(np.mean(errors))
        c.calibrated_within_2sigma = float(np.mean(within))
    if corrected:
        c.corrected = len(corrected)
        c.corrected_mape_pct = float(np.mean(corrected))
        c.corrected_within_2sigma = float(np.mean(corrected_within))


def _runs(
    data: StudyData,
    curves: dict[int, Any],
    train: dict[str, Any],
    budget: str,
    confirmed: dict[int, int],
    params: dict[int, Any],
) -> tuple[list, dict[int, Any]]:
    """The law's runs: each sandbox curve of `curves`, and each confirmation's curve (sandbox
    trial -> its confirmation trial in `confirmed`) at `budget`, keyed by the sandbox trial
    (their architectures share an amplitude). Curves that cannot be fitted are left out."""
    from archsearch.trainers.extrapolate import Run

    conf_curves = data.curves(list(confirmed.values()))
    confirm_train = {**train, "budget": budget}
    sandbox_runs, confirm_runs = [], {}
    for n, curve in curves.items():
        try:
            evals = (curve or {}).get("evals") or []
            sandbox_runs.append(Run.of(str(n), evals, train, params.get(n)))
        except ValueError:
            continue
    for trial, confirmation in confirmed.items():
        try:
            evals = (conf_curves.get(confirmation) or {}).get("evals") or []
            confirm_runs[trial] = Run.of(str(trial), evals, confirm_train, params.get(trial))
        except ValueError:
            continue
    return sandbox_runs, confirm_runs


def correct_predicted_axes(data: StudyData, labels: list[str]) -> dict[str, str]:
    """Each axis of `labels` that is a loss predicted at a budget this study confirmed
    trials at, on the sandbox corpus (`val_loss[tokens=1.6M]` after `confirm factor=10`),
    from the confirmations: a confirmed trial's value is its measured loss (std 0); every other
    fully trained trial's is the law's prediction (its shape fitted on the study's sandbox
    curves and the confirmations' curves) corrected across architectures by the
    confirmations (`archsearch.trainers.transfer`), or the law's alone where that cannot be
    corrected (too few confirmations, a mixer class none of them has). Written into each
    record's `attrs["predicted"]` in memory (the stored study is not changed). Returns
    label -> how its values were obtained, for the axes it corrected."""
    from archsearch.metrics import MetricSpec
    from archsearch.trainers.config import parse_budget

    train = dict(data.meta.get("train") or {})
    how: dict[str, str] = {}
    for label in labels:
        try:
            target = MetricSpec.parse(label).predicted_at
        except ValueError:
            continue
        if target is None or not train:
            continue
        want = parse_budget(target)
        confirmed: dict[int, TrialRecord] = {}
        for r in data.records:
            conf = r.attrs.get("confirm_train") or {}
            if r.status != Status.CONFIRMATION or "confirms" not in r.attrs:
                continue
            try:
                got = parse_budget(str(conf.get("budget", "")))
            except ValueError:
                continue
            same = _corpus(conf) == _corpus(train)
            at = got.kind == want.kind and math.isclose(got.amount, want.amount, rel_tol=1e-6)
            val = _finite((r.attrs.get("metrics") or {}).get("val_loss"))
            if same and at and val is not None:
                confirmed.setdefault(int(r.attrs["confirms"]), r)
        if confirmed:
            how[label] = _correct_axis(data, label, target, train, confirmed)
    return how


def _correct_axis(
    data: StudyData,
    label: str,
    target: str,
    train: dict[str, Any],
    confirmed: dict[int, TrialRecord],
) -> str:
    from archsearch.trainers.extrapolate import fit_shape
    from archsearch.trainers.transfer import fit_transfer

    pool = candidates(data.records)
    params = {r.number: r.attrs.get("params") for r in data.records}
    curves = data.curves([r.number for r in pool][:SHAPE_RUNS] + sorted(confirmed))
    measured = {n: float(r.attrs["metrics"]["val_loss"]) for n, r in confirmed.items()}
    sandbox_runs, confirm_runs = _runs(
        data, curves, train, target, {n: r.number for n, r in confirmed.items()}, params
    )
    why = ""
    try:
        shape = fit_shape(sandbox_runs + list(confirm_runs.values()))
    except ValueError as err:  # the others keep the prior shape's prediction (`predict_axes`)
        shape, why = None, f"the law's shape could not be fitted on this study: {err}"
    law = _law_losses(pool, curves, train, target, shape, params) if shape is not None else {}
    traits = _traits(pool)
    examples = _examples([(n, law[n].value, v) for n, v in measured.items() if n in law], traits)
    transfer = None
    if shape is not None:
        try:
            transfer = fit_transfer(examples)
        except ValueError as err:
            why = str(err)
    corrected, alone = _store_predicted(pool, label, confirmed, measured, law, transfer, traits)
    parts = [f"{len(measured)} trials measured by confirmations at {target}"]
    if shape is None:
        parts.append(f"the others by the law's prior shape, per trial ({why})")
    if corrected:
        parts.append(
            f"{corrected} predicted by the annealing law (shape fitted on this study) corrected "
            f"across architectures by {len(examples)} confirmations (`archsearch confirm` "
            "prints the correction's leave-one-out error)"
        )
    if alone:
        reason = why if transfer is None else "a mixer class no confirmation has, or no traits"
        parts.append(f"{alone} by the annealing law alone, shape fitted on this study ({reason})")
    return "; ".join(parts)


def _law_losses(
    pool: list[TrialRecord],
    curves: dict[int, Any],
    train: dict[str, Any],
    target: str,
    shape: Any,
    params: dict[int, Any],
) -> dict[int, Any]:
    """Trial number -> its loss at `target` by the annealing law of `shape`, from its curve
    (the trials whose curve the law cannot read are left out)."""
    from archsearch.trainers.extrapolate import predict_loss

    law = {}
    for r in pool:
        try:
            law[r.number] = predict_loss(
                curves.get(r.number) or r.attrs.get("curve") or {},
                train,
                target,
                shape=shape,
                params=params.get(r.number),
            )
        except (ValueError, AttributeError):
            continue
    return law


def _store_predicted(
    pool: list[TrialRecord],
    label: str,
    confirmed: dict[int, TrialRecord],
    measured: dict[int, float],
    law: dict[int, Any],
    transfer: Any,
    traits: dict[int, Any],
) -> tuple[int, int]:
    """Set each trial's `predicted[label]`: its confirmation's loss where one measured it, else
    the law's, corrected across architectures by `transfer` where its traits allow; returns
    how many were corrected and how many kept the law's alone."""
    from archsearch.trainers.transfer import UnseenMixer

    corrected, alone = 0, 0
    for r in pool:
        stored = dict(r.attrs.get("predicted") or {})
        if r.number in measured:
            stored[label] = {
                "value": measured[r.number],
                "std": 0.0,
                "law": f"measured by confirmation trial {confirmed[r.number].number}",
            }
        elif r.number in law:
            got = law[r.number]
            if transfer is not None and r.number in traits:
                try:
                    got = transfer.predict(traits[r.number], got.value)
                    corrected += 1
                except UnseenMixer:
                    alone += 1
            else:
                alone += 1
            stored[label] = {"value": got.value, "std": got.std, "law": got.law}
        r.attrs["predicted"] = stored
    return corrected, alone


def _traits(records: list[TrialRecord]) -> dict[int, Any]:
    """Trial number -> its `Traits` (architecture, parameters, training FLOPs per token), for
    the trials that stored all three."""
    from archsearch.analysis.proxies import cheap_signals
    from archsearch.trainers.transfer import Traits

    out = {}
    for r in records:
        signals = cheap_signals(r)
        params = signals.get("params", r.attrs.get("params"))
        try:
            out[r.number] = Traits.of(
                r.attrs.get("arch"), params, signals.get("train_flops_per_token")
            )
        except (ValueError, TypeError, UserError):
            continue
    return out


def _examples(rows: list[tuple[int, float, float | None]], traits: dict[int, Any]) -> list:
    """`Example`s of (sandbox trial, the law's prediction, the confirmed loss) rows, for the
    trials with traits and a confirmed loss."""
    from archsearch.trainers.transfer import Example

    return [
        Example(traits[n], law, confirmed)
        for n, law, confirmed in rows
        if n in traits and confirmed is not None
    ]


# ---- figures ----------------------------------------------------------------------------------


def _groups(c: Confirmation) -> list[tuple[str, list[ConfirmedTrial], dict[str, Any]]]:
    """The plotted groups: (name, trials, marker style)."""
    kept = [t for t in c.trials if t.on_sandbox_front and t.on_confirmed_front]
    left = [t for t in c.trials if t.on_sandbox_front and not t.on_confirmed_front]
    joined = [t for t in c.trials if not t.on_sandbox_front and t.on_confirmed_front]
    other = [t for t in c.trials if not t.on_sandbox_front and not t.on_confirmed_front]
    return [
        ("sandbox front, kept on the confirmed front", kept, {"color": "#1b7837", "marker": "o"}),
        ("sandbox front, off the confirmed front", left, {"color": "#d6604d", "marker": "X"}),
        ("joined the confirmed front", joined, {"color": "#2166ac", "marker": "^"}),
        ("neither front", other, {"color": "#999999", "marker": "."}),
    ]


def _titles(c: Confirmation) -> tuple[str, str, str]:
    unit = axis_title(c.objective)
    return (
        f"{unit} at the sandbox budget",
        f"{unit} at {c.budget_factor:g}x ({c.budget})",
        f"{c.study}: sandbox vs confirmed {c.objective} (Kendall tau "
        f"{'-' if c.kendall_tau is None else f'{c.kendall_tau:.2f}'}, front kept "
        f"{c.front_kept}/{c.front_members})",
    )


def confirm_mpl(c: Confirmation):
    """The matplotlib Figure of sandbox vs confirmed training objective."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xt, yt, title = _titles(c)
    fig, ax = plt.subplots(figsize=(7, 5.5))
    for name, trials, style in _groups(c):
        if trials:
            ax.scatter(
                [t.sandbox for t in trials],
                [t.confirmed for t in trials],
                label=f"{name} ({len(trials)})",
                s=60,
                **style,
            )
    for t in c.trials:
        ax.annotate(
            f"#{t.trial}",
            (t.sandbox, t.confirmed),
            fontsize=7,
            xytext=(3, 3),
            textcoords="offset points",
        )
    ax.set_xlabel(xt)
    ax.set_ylabel(yt)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def confirm_figure(c: Confirmation):
    """The plotly Figure of sandbox vs confirmed training objective (hover: the trial)."""
    import plotly.graph_objects as go

    symbols = {"o": "circle", "X": "x", "^": "triangle-up", ".": "circle-open"}
    xt, yt, title = _titles(c)
    fig = go.Figure()
    for name, trials, style in _groups(c):
        if not trials:
            continue
        fig.add_trace(
            go.Scatter(
                x=[t.sandbox for t in trials],
                y=[t.confirmed for t in trials],
                mode="markers",
                name=f"{name} ({len(trials)})",
                marker={"color": style["color"], "symbol": symbols[style["marker"]], "size": 10},
                text=[
                    f"trial {t.trial} (confirmation {t.confirmation}): {t.summary}" for t in trials
                ],
                hovertemplate="%{text}<br>sandbox %{x:.4f}<br>confirmed %{y:.4f}<extra></extra>",
            )
        )
    fig.update_layout(title=title, xaxis_title=xt, yaxis_title=yt, template="plotly_white")
    return fig


def write_confirm_outputs(c: Confirmation, out_dir: Path) -> dict[str, Path]:
    """confirm.png and confirm.html in `out_dir`."""
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    fig = confirm_mpl(c)
    png = out_dir / "confirm.png"
    fig.savefig(png, dpi=120)
    plt.close(fig)
    page = out_dir / "confirm.html"
    confirm_figure(c).write_html(page, include_plotlyjs="cdn")
    return {"png": png, "html": page}


# ---- report sections --------------------------------------------------------------------------

COLUMNS = (
    "trial",
    "summary",
    "sandbox",
    "confirmed",
    "sandbox front",
    "confirmed front",
    "predicted (+-1 sigma)",
)


def table_rows(c: Confirmation) -> list[list[str]]:
    """The confirmed trials as text cells (`COLUMNS`), best confirmed first."""
    sign = 1.0 if c.direction == "minimize" else -1.0
    rows = []
    for t in sorted(c.trials, key=lambda t: sign * t.confirmed):
        predicted = (
            f"{t.predicted:.4f} +- {t.predicted_std:.4f}" if t.predicted is not None else "-"
        )
        rows.append(
            [
                str(t.trial),
                t.summary,
                f"{t.sandbox:.4f}",
                f"{t.confirmed:.4f}",
                "yes" if t.on_sandbox_front else "",
                "yes" if t.on_confirmed_front else "",
                predicted,
            ]
        )
    return rows


def panel(data: StudyData) -> list[dict[str, Any]]:
    """The dashboard's panel: one {title, facts, columns, rows} per confirmation."""
    return [
        {
            "title": f"{SECTION}: {c.budget_factor:g}x, seed {c.seed}",
            "facts": [list(f) for f in c.facts()],
            "columns": list(COLUMNS),
            "rows": table_rows(c),
        }
        for c in confirmations(data)
    ]


def markdown_section(data: StudyData) -> list[str]:
    """The report's section (no lines when the study holds no confirmation)."""
    found = confirmations(data)
    if not found:
        return []
    lines = [f"## {SECTION}", ""]
    for c in found:
        lines += [f"### {c.budget_factor:g}x, seed {c.seed}", ""]
        lines += [f"- **{k}**: {v}" for k, v in c.facts()]
        lines += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        lines += ["| " + " | ".join(r) + " |" for r in table_rows(c)]
        lines.append("")
    return lines


def html_section(data: StudyData) -> str:
    """The HTML report's section ("" when the study holds no confirmation)."""
    e = html.escape
    found = confirmations(data)
    if not found:
        return ""
    parts = [f"<h2>{e(SECTION)}</h2>"]
    for c in found:
        facts = "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in c.facts())
        head = "".join(f"<th>{e(h)}</th>" for h in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{e(cell)}</td>" for cell in row) + "</tr>"
            for row in table_rows(c)
        )
        parts.append(
            f"<h3>{c.budget_factor:g}x, seed {c.seed}</h3><table>{facts}</table>"
            f"<table><tr>{head}</tr>{body}</table>"
        )
    return "\n".join(parts)
