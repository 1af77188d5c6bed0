"""A stored study in a notebook: `open_study(path_or_url)` gives its trials as a pandas
DataFrame (as Optuna's `Study.trials_dataframe` does for a plain study, with what an archsearch
study adds: statuses and reasons, every cost on every device with the error of each predicted
latency, predicted losses with their error, replicates and duplicates), the front of any
device, what the study learned (`archsearch.analysis.insights`) as DataFrames, and the figures
as plotly objects, which Jupyter draws inline. Nothing is written: the study is read once, and
`Study.reload()` reads it again.

    import archsearch
    study = archsearch.open_study("runs/tiny")
    df = study.trials()                      # one row per trial
    study.front("jetson_orin_nx")            # the front on another device
    study.effects()                          # every level's effect with its interval
    study.front_figure("rpi5")               # a plotly Figure
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

import numpy as np

from archsearch.analysis.front import LATENCIES, latency_errors, value_of
from archsearch.analysis.insights import Insights, insights
from archsearch.analysis.pareto import Pareto, analyse, choose_axes
from archsearch.metrics import MetricSpec, parse_label
from archsearch.study import StudyData, load

__all__ = ["Study", "open_study"]


def open_study(path_or_url: str, study_name: str | None = None) -> Study:
    """A study for a notebook: a run directory (holding study.db), an SQLite file or a
    database URL, as `study=` names it on the command line; `study_name` when the storage
    holds several. Bad input raises `archsearch.errors.UserError` with one line."""
    return Study(str(path_or_url), study_name)


class Study:
    """A stored study, read for analysis (see the module docstring)."""

    def __init__(self, path_or_url: str, study_name: str | None = None) -> None:
        self.location, self.study_name = path_or_url, study_name
        self.data: StudyData = load(path_or_url, study_name)
        self._insights: dict[tuple, Insights] = {}

    def reload(self) -> Study:
        """Read the study again (a sweep still running has added trials)."""
        self.data, self._insights = load(self.location, self.study_name), {}
        self.__dict__.pop("devices", None)
        return self

    def __repr__(self) -> str:
        trained = len(self.data.trained)
        return (
            f"<archsearch study {self.name!r}: {len(self.data.records)} trials, {trained} fully "
            f"trained; objectives {', '.join(self.objectives)}; device {self.device}>"
        )

    # -- what it is ----------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.data.name

    @property
    def objectives(self) -> list[str]:
        return list(self.data.objectives)

    @property
    def device(self) -> str:
        """The device the sweep ran for."""
        return str(self.data.meta.get("device") or "rpi5")

    @cached_property
    def devices(self) -> list[str]:
        """The devices whose costs every trial stores."""
        return [d for d in self.data.meta.get("devices", []) if isinstance(d, str)]

    # -- trials --------------------------------------------------------------------------------

    def trials(self, device: str | None = None):
        """One row per trial: `number`, `state` (Optuna's), `status` and `reason`
        (archsearch's), `arch_hash`, `summary`, `family`, `attention_share`, `params_<name>`
        for each searched parameter, `values_<objective>`, `constraints_<name>` (<= 0:
        satisfied), `cost_<label>` for every stored cost on every device (a predicted latency
        with `cost_<label>:error`, its relative +-), `predicted_<label>` and
        `predicted_<label>:std` for a loss predicted at another budget, and the links of
        duplicates, replicates and confirmations. With `device`, the costs of the study's
        objectives and constraints on that device too (from the stored architecture by the
        cost model where the sweep did not price it)."""
        import pandas as pd

        records = self.data.records
        rows = [self._row(r) for r in records]
        df = pd.DataFrame(rows)
        if df.empty:
            return df
        labels = [c[len("cost_") :] for c in df.columns if c.startswith("cost_")]
        if device is not None:
            from archsearch.latency import load_device

            load_device(device)
            for label in self._device_labels(device):
                column = f"cost_{label}"
                if column not in df:
                    df[column] = [value_of(r, label, self.objectives) for r in records]
                    labels.append(label)
        for label in labels:
            name = parse_label(label)[0]
            if name in LATENCIES and "device" in parse_label(label)[1]:
                errors = latency_errors(records, label)
                if errors is not None:
                    df[f"cost_{label}:error"] = errors
        first = ["number", "state", "status", "reason", "arch_hash", "summary", "family"]
        ordered = [c for c in first if c in df] + sorted(c for c in df if c not in first)
        return df[ordered]

    def _row(self, r) -> dict[str, Any]:
        a = r.attrs
        row: dict[str, Any] = {
            "number": r.number,
            "state": r.state,
            "status": r.status,
            "reason": r.reason,
            "arch_hash": a.get("arch_hash"),
            "summary": a.get("summary"),
            "family": a.get("family"),
            "attention_share": a.get("attention_share"),
        }
        row.update({f"params_{k}": v for k, v in r.params.items()})
        stored = r.values
        for key in ("duplicate_values", "replicate_values", "confirm_values"):
            if stored is None and isinstance(a.get(key), list):
                stored = a[key]
        if stored is not None and len(stored) == len(self.objectives):
            row.update({f"values_{o}": v for o, v in zip(self.objectives, stored)})
        row.update({f"constraints_{k}": v for k, v in r.constraints.items()})
        row.update({f"cost_{k}": v for k, v in (a.get("costs") or {}).items()})
        for costs in (a.get("device_costs") or {}).values():
            row.update({f"cost_{k}": v for k, v in costs.items()})
        for label, got in (a.get("predicted") or {}).items():
            if isinstance(got, dict):
                row[f"predicted_{label}"] = got.get("value")
                row[f"predicted_{label}:std"] = got.get("std")
        for key in ("duplicate_of", "replicate_of", "confirms", "seed"):
            if key in a:
                row[key] = a[key]
        return row

    def _device_labels(self, device: str) -> list[str]:
        from archsearch.analysis.front import for_device, study_labels

        out = []
        for label in study_labels(self.data.meta, self.objectives):
            try:
                spec = MetricSpec.parse(label)
            except ValueError:
                continue
            if spec.phase == "cost":
                out.append(for_device(label, device))
        return list(dict.fromkeys(out))

    # -- fronts --------------------------------------------------------------------------------

    def pareto(self, device: str | None = None, x=None, y=None, z=None) -> Pareto:
        """The front on `device` (default: the sweep's) over the study's objectives or the
        axes named as `archsearch pareto` names them (`x="cache_bytes"`)."""
        device = device or self.device
        axes, is_default = choose_axes(self.data, device, x, y, z)
        return analyse(self.data, device, axes, is_default=is_default)

    def front(self, device: str | None = None, x=None, y=None, z=None):
        """The front's rows as a DataFrame, best first on the first axis (the table
        `archsearch pareto` prints, with every column)."""
        import pandas as pd

        return pd.DataFrame(self.pareto(device, x, y, z).front_rows())

    def front_figure(self, device: str | None = None, x=None, y=None, z=None):
        """The interactive front (a plotly Figure, as the report's front.html draws it)."""
        from archsearch.analysis.plots import front_figure

        return front_figure(self.pareto(device, x, y, z))

    # -- what it learned -----------------------------------------------------------------------

    def insights(self, device: str | list[str] | None = None, **kwargs: Any) -> Insights:
        """What the study learned (`archsearch.analysis.insights.insights`): objectives on
        `device` (one or a list; default: the sweep's), fronts on the same devices; `kwargs`
        as the function takes them (`resamples=`, `extra=`, `seed=`). Kept per arguments."""
        devices = [device] if isinstance(device, str) else list(device or [self.device])
        key = (tuple(devices), tuple(sorted(kwargs.items(), key=lambda kv: kv[0])))
        if key not in self._insights:
            kw = {"fronts": devices, **kwargs}
            self._insights[key] = insights(self.data, devices, **kw)
        return self._insights[key]

    def statements(self, device=None, **kwargs: Any) -> list[str]:
        """Every finding in words (`Insights.statements`)."""
        return self.insights(device, **kwargs).statements()

    def effects(self, device=None, **kwargs: Any):
        """Every main effect as a row: objective, factor, level, reference, n, n_reference,
        estimate, low, high (95%), unit ('%' for a relative effect), status, resolved."""
        import pandas as pd

        rows = []
        for o in self.insights(device, **kwargs).objectives:
            for e in o.effects:
                i = e.interval
                rows.append(
                    {
                        "objective": e.objective,
                        "factor": e.factor,
                        "level": e.level,
                        "reference": e.reference,
                        "n": e.n,
                        "n_reference": e.n_reference,
                        "estimate": i.estimate if i else np.nan,
                        "low": i.low if i else np.nan,
                        "high": i.high if i else np.nan,
                        "unit": e.unit,
                        "status": e.status,
                        "resolved": e.resolved,
                    }
                )
        return pd.DataFrame(rows)

    def importance(self, device=None, **kwargs: Any):
        """Every parameter's fANOVA importance per objective with its 95% interval; no row for
        an objective whose trials cannot separate the parameters yet (`statements` say so)."""
        import pandas as pd

        columns = ["objective", "factor", "share", "low", "high"]
        return pd.DataFrame(
            [
                [i.objective, i.factor, i.share, i.low, i.high]
                for o in self.insights(device, **kwargs).objectives
                for i in o.importance
            ],
            columns=columns,  # kept when no objective has enough trials (`importance.support`)
        )

    def interactions(self, device=None, **kwargs: Any):
        """Every two-way interaction contrast tested, with its interval and whether it is
        notable (its interval excludes 0)."""
        import pandas as pd

        rows = []
        for o in self.insights(device, **kwargs).objectives:
            for i in o.interactions:
                rows.append(
                    {
                        "objective": i.objective,
                        "factors": " x ".join(i.factors),
                        "levels": i.levels,
                        "bases": i.bases,
                        "difference": i.interval.estimate,
                        "low": i.interval.low,
                        "high": i.interval.high,
                        "at_level": i.at_level.estimate,
                        "at_base": i.at_base.estimate,
                        "unit": i.unit,
                        "notable": i.notable,
                    }
                )
        return pd.DataFrame(rows)

    def importance_figure(self, objective: str | None = None, device=None, **kwargs: Any):
        """The importance chart of one objective (default: the first) as a plotly Figure."""
        from archsearch.analysis.insight_plots import importance_figure

        return importance_figure(self._objective(objective, device, kwargs))

    def effects_figure(self, objective: str | None = None, device=None, **kwargs: Any):
        """The effect plot of one objective (default: the first) as a plotly Figure."""
        from archsearch.analysis.insight_plots import effects_figure

        ins = self.insights(device, **kwargs)
        return effects_figure(self._objective(objective, device, kwargs), ins.design)

    def _objective(self, objective: str | None, device, kwargs: dict):
        from archsearch.analysis.insights import short_label
        from archsearch.errors import UserError

        ins = self.insights(device, **kwargs)
        if objective is None:
            return ins.objectives[0]
        for o in ins.objectives:
            if objective in (o.label, short_label(o.label)):
                return o
        known = ", ".join(short_label(o.label) for o in ins.objectives)
        raise UserError(f"no objective {objective!r} (known: {known})", key="objective")
