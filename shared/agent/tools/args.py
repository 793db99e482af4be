"""Tool arguments as pydantic models: one declaration gives the schema and the validation.

A tool's ``Args`` model is the only place its parameters are written down (as in
pydantic-ai): the JSON schema the model sees is generated from it, and the arguments the
model sends are validated by it, so the two cannot drift apart.

The schema is paid for on every request, so it is generated lean: no titles, no
``null`` alternatives (a ``null`` the model sends for an optional parameter is taken as
"not given", see :class:`ToolArgs`), and only the keywords every provider behind litellm
accepts. ``additionalProperties: false`` says what validation enforces: an unknown
parameter is refused, not silently dropped; OpenAI and Anthropic take it as is, and
litellm removes it for the providers that do not (Gemini, watsonx).

Validation is strict, as the hand-written checks were: ``"3"`` is not an integer and
``1`` is not ``true``. A failure becomes one :class:`~shared.errors.ToolError` naming each
field and what is wrong with it, which the model reads and retries.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import ErrorDetails, core_schema

from shared.errors import ToolError

SCHEMA_KEYWORDS = frozenset(
    {"type", "properties", "required", "additionalProperties", "description", "items", "enum"}
)
"""What a tool schema keeps: enough for the model to call the tool right."""
DROPPED_KEYWORDS = frozenset(
    {"title", "default", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
)
"""Left out to keep the schema small: titles repeat the names, and a default or a bound
the model needs is said in the description; validation still enforces every bound, and
its error says it. Any other keyword (``anyOf``, ``$ref`` …) is refused when the tool is
defined rather than silently lost."""
SHOWN_INPUT_CHARS = 60
"""A wrong value is quoted (as JSON, as the model wrote it) up to this length: it may be
a whole file."""


class ToolArgs(BaseModel):
    """The base of every tool's ``Args``: strict, closed, and lenient only about ``null``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _null_means_not_given(cls, data: Any) -> Any:
        """Models often send ``null`` for an optional parameter they mean to leave out;
        so it gets its default (and a required one is reported as missing)."""
        if isinstance(data, dict):
            return {name: value for name, value in data.items() if value is not None}
        return data


def _not_empty(value: str) -> str:
    if not value:
        raise ValueError("must not be empty")
    return value


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or only whitespace")
    return value


NonEmptyStr = Annotated[str, AfterValidator(_not_empty)]
NonBlankStr = Annotated[str, AfterValidator(_not_blank)]


def clamped(low: int, high: int) -> AfterValidator:
    """Bring an integer into ``[low, high]`` rather than refuse it: a search limit of 50
    is a fine request for "as many as you can", answered with ``high``."""

    def clamp(value: int) -> int:
        return max(low, min(high, value))

    return AfterValidator(clamp)


def parameters_schema(args: type[ToolArgs]) -> dict[str, Any]:
    """The ``parameters`` JSON schema of a tool taking ``args``: its names, types,
    descriptions and required fields, and nothing else (see :data:`SCHEMA_KEYWORDS`)."""
    return _lean(args.model_json_schema(schema_generator=_NoNullSchema), args)


def parse_args(tool: str, args: type[ToolArgs], raw: dict[str, Any]) -> ToolArgs:
    """``raw`` validated by ``args``, or a ``ToolError`` the model can act on."""
    try:
        return args.model_validate(raw)
    except ValidationError as exc:
        raise ToolError(_explain(tool, args, exc)) from None


class _NoNullSchema(GenerateJsonSchema):
    """``X | None`` as plain ``X``: a ``null`` is accepted as "not given", never offered."""

    def nullable_schema(self, schema: core_schema.NullableSchema) -> JsonSchemaValue:
        return self.generate_inner(schema["schema"])


def _lean(node: dict[str, Any], args: type[ToolArgs]) -> dict[str, Any]:
    unknown = node.keys() - SCHEMA_KEYWORDS - DROPPED_KEYWORDS
    if unknown:
        raise TypeError(f"{args.__qualname__}: the tool schema cannot express {sorted(unknown)}")
    lean = {key: value for key, value in node.items() if key in SCHEMA_KEYWORDS}
    if "properties" in lean:
        lean["properties"] = {name: _lean(sub, args) for name, sub in lean["properties"].items()}
    if "items" in lean:
        lean["items"] = _lean(lean["items"], args)
    return lean


def _explain(tool: str, args: type[ToolArgs], exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    text = f"invalid arguments for {tool}: {'; '.join(_problem(error) for error in errors)}"
    if any(error["type"] in ("missing", "extra_forbidden") for error in errors):
        text += f". {tool} takes {_signature(args)}"
    return text


def _problem(error: ErrorDetails) -> str:
    field = ".".join(str(part) for part in error["loc"]) or "the arguments"
    kind = error["type"]
    if kind == "missing":
        return f"{field} is required"
    if kind == "extra_forbidden":
        return f"{field} is not a parameter"
    if kind == "value_error":
        return f"{field} {error['ctx']['error']}"
    shown = json.dumps(error["input"], ensure_ascii=False, default=repr)
    if len(shown) > SHOWN_INPUT_CHARS:
        shown = shown[: SHOWN_INPUT_CHARS - 1] + "…"
    return f"{field} {error['msg'].removeprefix('Input ')} (got {shown})"


def _signature(args: type[ToolArgs]) -> str:
    """``path (required), offset, limit``: what the tool takes, in schema order."""
    return ", ".join(
        f"{name} (required)" if field.is_required() else name
        for name, field in args.model_fields.items()
    )
