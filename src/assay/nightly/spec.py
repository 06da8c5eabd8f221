"""The ``nightly:`` section of a study spec: which metrics gate the night, against what baseline.

Gates never change results, so the section is outside the spec checksum (``NON_RESULT_FIELDS``).

Example:
    >>> g = NightlySpec.model_validate({"must_not_regress": ["pass@1", "truncated"],
    ...                                 "lower_is_better": ["truncated"], "baseline": "best"})
    >>> g.metric_names(), g.baseline
    (['pass@1', 'marker:truncated'], 'best')
    >>> NightlySpec.model_validate({"baseline": "yesterday"})
    Traceback (most recent call last):
    ...
    pydantic_core._pydantic_core.ValidationError: 1 validation error for NightlySpec
    baseline
      Value error, baseline must be 'previous', 'last_good', 'best' or a night date YYYY-MM-DD, ...
    ...
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable

from pydantic import Field, field_validator, model_validator

from assay.nightly.directions import Direction, direction
from assay.specbase import SpecModel

_BLOCK = re.compile(r"^[a-z0-9-]+/[A-Za-z0-9_.-]+$")


def metric_name(name: str) -> str:
    """The compare metric a gate names: ``pass@1`` or ``marker:<name>`` (bare names are markers)."""
    return "pass@1" if name == "pass@1" else f"marker:{name.removeprefix('marker:')}"


#: The baseline rules besides a night date (see NightlySpec.baseline).
BASELINE_RULES = ("previous", "last_good", "best")


class NightlySpec(SpecModel):
    """Regression gates for the nightly flow (``assay nightly``)."""

    must_not_regress: list[str] = Field(
        default_factory=lambda: ["pass@1"],
        description="metrics whose paired compare verdict 'worse' against the baseline fails the "
        "night: 'pass@1' or marker names; every other metric is reported, never gated")
    lower_is_better: list[str] = Field(
        default_factory=list,
        description="markers where a decrease is better, beyond assay's own (truncated, "
        "stop_trimmed, contaminated, and any name with error/fail/refus/timeout in it)")
    higher_is_better: list[str] = Field(
        default_factory=list,
        description="markers where an increase is better, where assay's default says otherwise "
        "(token counts and lengths have no direction unless listed here or in lower_is_better)")
    baseline: str = Field(
        "previous", description="'previous' (the last night), 'last_good' (the last night "
        "without a regression: a lasting regression is reported every night until it is "
        "fixed), 'best' (the night with the best value of the first gated metric, per source) "
        "or a night date YYYY-MM-DD")
    timezone: str | None = Field(
        None, description="IANA timezone the night's date is read in (a run at 05:50 in "
        "Asia/Tokyo is that day's night); default: the deployment schedule's timezone, else "
        "the machine's local time")
    alpha: float = Field(0.05, gt=0, lt=1,
                         description="family-wise level over the gated metrics (Holm)")
    notify: str | None = Field(
        None, description="where a regression is announced: a webhook URL (http[s]://...) or a "
        "Prefect notification block as '<block-type-slug>/<block-name>' (e.g. slack-webhook/ops)")
    history_nights: int = Field(30, ge=1, description="nights in the nightly report's history plot")
    allow_partial: bool = Field(
        False, description="a source with failed samples tonight (gen_error: the model gave no "
        "completion) is compared on its tasks answered in full, the tasks left out listed in "
        "nightly.md; default false: it is not compared at all. Either way the night is partial "
        "(exit 4, flow run Failed, alert)")
    continues: list[str] = Field(
        default_factory=list,
        description="earlier study definitions (specdef:... as the night that started a new "
        "history printed it) whose nights stay in this study's history and may be its baseline: "
        "carry the baseline over a change you judge harmless (a reworded filter, a new marker)")

    @field_validator("continues")
    @classmethod
    def _definitions(cls, v: list[str]) -> list[str]:
        for i, d in enumerate(v):
            if not re.fullmatch(r"specdef:[0-9a-f]{8,64}", d):
                raise ValueError(f"[{i}]: a study definition reads specdef:<hex> (printed by the "
                                 f"night that started the new history), got {d!r}")
        return v

    @field_validator("must_not_regress", "lower_is_better", "higher_is_better")
    @classmethod
    def _names(cls, v: list[str]) -> list[str]:
        for i, n in enumerate(v):
            if not n or not n.strip() or n != n.strip():
                raise ValueError(f"[{i}]: metric names are 'pass@1' or a marker name, got {n!r}")
        if len({metric_name(n) for n in v}) != len(v):
            raise ValueError(f"a metric is listed twice: {v}")
        return v

    @field_validator("baseline", mode="before")
    @classmethod
    def _date_text(cls, v: object) -> object:
        # YAML reads an unquoted 2026-11-02 as a date: it names the same night
        return v.isoformat() if isinstance(v, dt.date) else v

    @field_validator("baseline")
    @classmethod
    def _baseline(cls, v: str) -> str:
        if v in BASELINE_RULES:
            return v
        try:
            dt.date.fromisoformat(v)
        except ValueError:
            raise ValueError(f"baseline must be 'previous', 'last_good', 'best' or a night date "
                             f"YYYY-MM-DD, got {v!r}") from None
        return v

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"timezone must be an IANA name such as Europe/Berlin, Asia/Tokyo "
                             f"or UTC, got {v!r}") from None
        return v

    @field_validator("notify")
    @classmethod
    def _notify(cls, v: str | None) -> str | None:
        if v is None or v.startswith(("http://", "https://")) or _BLOCK.match(v):
            return v
        raise ValueError(f"notify must be a webhook URL (http[s]://...) or a Prefect block "
                         f"'<block-type-slug>/<name>' such as 'slack-webhook/ops', got {v!r}")

    @model_validator(mode="after")
    def _lower(self) -> NightlySpec:
        if "pass@1" in self.lower_is_better:
            raise ValueError("lower_is_better: pass@1 is higher-is-better; list markers only")
        both = sorted({metric_name(n) for n in self.lower_is_better}
                      & {metric_name(n) for n in self.higher_is_better})
        if both:
            raise ValueError(f"{both} listed in both lower_is_better and higher_is_better")
        undirected = [n for n in self.must_not_regress if self.direction(metric_name(n)) is None]
        if undirected:
            raise ValueError(f"must_not_regress: {undirected} have no direction (a rise is "
                             "neither better nor worse); list each in lower_is_better or "
                             "higher_is_better to gate it")
        return self

    def direction(self, metric: str) -> Direction:
        """A metric's direction with this spec's declarations (:mod:`assay.nightly.directions`)."""
        return direction(metric, lower_is_better=self.lower_is_better,
                         higher_is_better=self.higher_is_better)

    def metric_names(self) -> list[str]:
        """The gated metrics as compare names, in order."""
        return [metric_name(n) for n in self.must_not_regress]

    def lower_names(self, metrics: Iterable[str] = ()) -> list[str]:
        """The metrics where a rise is worse: those declared, and of ``metrics`` those assay
        knows to be (:func:`assay.nightly.directions.direction`)."""
        out = [metric_name(n) for n in self.lower_is_better]
        return out + [m for m in metrics if m not in out and self.direction(m) == "lower"]


def night_date(when: dt.datetime | None = None, timezone: str | None = None) -> str:
    """The night (YYYY-MM-DD) an instant belongs to, read in ``timezone`` (an IANA name; None:
    this machine's local time). ``when`` defaults to now; a naive ``when`` is UTC.

    Example:
        >>> t = dt.datetime(2026, 12, 4, 20, 50, tzinfo=dt.UTC)  # 05:50 in Tokyo
        >>> night_date(t, "Asia/Tokyo"), night_date(t, "UTC")
        ('2026-12-05', '2026-12-04')
    """
    from zoneinfo import ZoneInfo

    when = when if when is not None else dt.datetime.now(dt.UTC)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(ZoneInfo(timezone) if timezone else None).date().isoformat()


def specs_timezone(nightlies: list[NightlySpec | None]) -> str | None:
    """The one ``nightly.timezone`` these specs name (None when none does); ValueError naming
    both when two differ (their nights would be different dates)."""
    zones = sorted({n.timezone for n in nightlies if n is not None and n.timezone})
    if len(zones) > 1:
        raise ValueError(f"nightly.timezone differs between the specs of one night ({zones}): "
                         "give them the same timezone, run them separately, or pass --night")
    return zones[0] if zones else None
