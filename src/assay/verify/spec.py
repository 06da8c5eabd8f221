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

from assay.jsontypes import JSONObject
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

    def _kind(self) -> object:
        """The registered class (or factory) of this kind; None for a ``module:callable`` kind,
        which is not imported to answer what it declares: it gets the defaults below."""
        if ":" in self.kind:
            return None
        from assay.verify.registry import VERIFIERS

        return VERIFIERS.get(self.kind).obj

    def _declares(self, attr: str, default: Any) -> Any:
        return getattr(self._kind(), attr, default)

    @property
    def takes_function(self) -> bool:
        """Whether this kind grades with the user's ``function:`` (kind function)."""
        return bool(self._declares("takes_function", False))

    @property
    def open_markers(self) -> bool:
        """Whether only the run can tell which markers this verifier's rows carry: a kind that
        runs user code, or a ``module:callable`` kind."""
        return self._kind() is None or bool(self._declares("open_markers", False))

    @property
    def under_test_params(self) -> tuple[str, ...]:
        """``params`` keys naming the model that grades (a judge's): outside the study
        definition."""
        return tuple(self._declares("under_test_params", ()))

    def grading_model(self) -> JSONObject | None:
        """The model entry this verifier grades with (a judge's ``params.model``: spec JSON), or
        None."""
        key = self._declares("model_param", None)
        model = self.params.get(key) if key else None
        return model if isinstance(model, dict) else None

    @model_validator(mode="after")
    def _function_iff_kind(self) -> VerifierSpec:
        if self.takes_function and self.function is None:
            raise ValueError(
                f"kind {self.kind} needs function: 'package.module:callable' (your grader)"
            )
        if not self.takes_function:
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
        out = tuple(self._declares("WARM_IMPORTS", ()))
        model = self.grading_model()
        if model is not None and "kind" in model:
            from assay.models.specs import backend_spec

            try:
                out += tuple(getattr(backend_spec(model), "WARM_IMPORTS", ()))
            except Exception:  # noqa: BLE001 (an entry building the judge reports properly)
                pass
        return out

    def label(self) -> str:
        """How the report names the verifier: the kind's ``label_for`` (a judge's model, a
        function and its version), else its kind."""
        label_for = self._declares("label_for", None)
        return str(label_for(self)) if callable(label_for) else self.kind

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
            return [f"{'function' if self.takes_function else 'kind'}: {e}"]
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
