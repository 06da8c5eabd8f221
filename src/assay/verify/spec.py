"""The ``verifier:`` entry of a source: which verifier grades it, checked, labelled and built
here, next to the verifiers it names.

Example:
    >>> v = VerifierSpec(kind="numeric", params={"tol": 0.01})
    >>> v.label(), v.check(), v.build().check("The answer is 3.001", "3", {}).reward
    ('numeric', [], 1.0)
    >>> VerifierSpec(kind="numeric", params={"tolerance": 1}).check()[0][:7]
    'params:'
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from assay.specbase import SpecModel, version_field

__all__ = ["VerifierSpec"]


class VerifierSpec(SpecModel):
    """Which verifier grades a source: a registered kind (``assay.verify.registry.VERIFIERS``)
    or ``module:callable`` building one, with its keyword arguments. ``kind: function`` runs
    your own grading function (``function: 'mypkg.graders:grade'``, its ``params`` passed as
    keyword arguments) through the judge contract."""

    kind: str = Field(description="a registered verifier kind, or 'package.module:callable'")
    params: dict[str, Any] = Field(default_factory=dict)
    function: str | None = Field(
        None, pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$",
        description="kind function only: 'package.module:callable' grading one completion, "
        "called by its parameter names: any of prompt, completion, reference, row, meta (any "
        "order), its params as keywords, **kwargs for all; a module next to the spec imports "
        "without PYTHONPATH")
    version: str | None = version_field("cached grades", only="kind function only: ")

    @field_validator("kind")
    @classmethod
    def _known(cls, v: str) -> str:
        from assay.verify.registry import VERIFIERS

        if v not in VERIFIERS and ":" not in v:
            VERIFIERS.get(v)  # raises with the known kinds and the closest match
        return v

    @model_validator(mode="after")
    def _function_iff_kind(self) -> VerifierSpec:
        if self.kind == "function" and self.function is None:
            raise ValueError(
                "kind function needs function: 'package.module:callable' (your grader)"
            )
        if self.kind != "function":
            for f in ("function", "version"):
                if getattr(self, f) is not None:
                    raise ValueError(
                        f"{f} is only for kind function (this verifier is kind {self.kind!r}); "
                        "drop it, or set kind: function"
                    )
        return self

    def warm_imports(self) -> tuple[str, ...]:
        """What building and running this verifier imports in the study's process (see
        assay.libguard): its class's ``WARM_IMPORTS``, and a judge model's."""
        out: tuple[str, ...] = ()
        if ":" not in self.kind:
            from assay.verify.registry import VERIFIERS

            out = tuple(getattr(VERIFIERS.get(self.kind).obj, "WARM_IMPORTS", ()))
        model = self.params.get("model")
        if self.kind == "judge" and isinstance(model, dict) and "kind" in model:
            from assay.models.specs import backend_spec

            try:
                out += tuple(getattr(backend_spec(model), "WARM_IMPORTS", ()))
            except Exception:  # noqa: BLE001 (an entry building the judge reports properly)
                pass
        return out

    def label(self) -> str:
        """How the report names the verifier: its kind, or the function (and its version)."""
        if self.kind == "judge" and isinstance(self.params.get("model"), dict):
            from assay.nightly.under_test import judge_label

            return f"judge {judge_label(self.params['model'])}"  # the judge model is on the page
        if self.kind == "function":
            return f"function {self.function}" + (
                f" (version {self.version})" if self.version else ""
            )
        return self.kind

    def check(self, base_dir: str | None = None) -> list[str]:
        """Problems building this verifier would hit, found without grading (``assay validate``),
        each as ``yaml.path: message`` relative to the entry (``function: ...``, ``params: ...``):
        a function that does not import or fit, params the verifier does not take."""
        import inspect

        from assay.errors import SpecError

        try:
            obj = self._impl(base_dir)
            if callable(getattr(obj, "from_spec", None)):  # builds itself from the entry
                obj.from_spec(self, base_dir)
                return []
            inspect.signature(obj).bind(**self.params)
        except SpecError as e:
            return [f"{'function' if self.kind == 'function' else 'kind'}: {e}"]
        except TypeError as e:
            return [f"params: {e} ({self.kind} takes {list(inspect.signature(obj).parameters)})"]
        return []

    def _impl(self, base_dir: str | None) -> Any:
        from assay.registry import load_callable
        from assay.verify.registry import VERIFIERS

        return (VERIFIERS.get(self.kind).obj if ":" not in self.kind
                else load_callable(self.kind, what="verifier kind", base_dir=base_dir))

    def build(self, base_dir: str | None = None) -> Any:
        """The verifier object (its class or factory called with ``params``; a kind whose class
        has ``from_spec(vspec, base_dir)`` builds itself from the whole entry)."""
        import inspect

        from assay.errors import SpecError

        obj = self._impl(base_dir)
        from_spec = getattr(obj, "from_spec", None)
        if callable(from_spec):
            return from_spec(self, base_dir)
        try:
            inspect.signature(obj).bind(**self.params)
        except TypeError as e:
            raise SpecError(f"verifier {self.kind}: bad params {self.params} ({e})") from None
        except ValueError:  # no signature (a builtin): let the call say what is wrong
            pass
        return obj(**self.params)
