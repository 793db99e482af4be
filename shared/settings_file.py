"""Reading ``agentd.toml`` strictly, and saying where a refused setting came from.

A file that is not TOML, or that names a key agentd has no setting for, is refused with
one line naming the file, the place and (for a key) the nearest setting's name: a typo
such as ``tool_netwrok = true`` silently falling back to the default is worse than not
starting, since the user believes the setting is in force. ``home`` is refused too: the
file lives inside the home, so the home can come only from ``AGENTD_HOME``.

A value pydantic refuses is named as the user wrote it: ``AGENTD_WORKERS='abc'`` when it
came from the environment, ``workers in /path/agentd.toml`` when from the file.
"""

from __future__ import annotations

import difflib
import os
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import BaseSettings, TomlConfigSettingsSource

from shared.errors import InvalidSettings

ENV_PREFIX = "AGENTD_"
ENV_ONLY = frozenset({"home"})
"""Settings the file may not hold (the file is found through them)."""


class StrictTomlSource(TomlConfigSettingsSource):
    """``agentd.toml`` as pydantic-settings reads it, refusing what it would pass over."""

    def __init__(self, settings_cls: type[BaseSettings], toml_file: Path) -> None:
        self.path = toml_file
        super().__init__(settings_cls, toml_file=toml_file)
        known = set(settings_cls.model_fields) - ENV_ONLY
        for key in self.toml_data:
            if key in ENV_ONLY:
                raise InvalidSettings(
                    f"{toml_file}: `{key}` cannot be set in the file that lives in it; set "
                    f"{ENV_PREFIX}{key.upper()} in the environment instead"
                )
            if key not in known:
                near = difflib.get_close_matches(key, sorted(known), n=1)
                hint = f" (did you mean `{near[0]}`?)" if near else ""
                raise InvalidSettings(
                    f"{toml_file}: unknown setting `{key}`{hint}; the settings are the "
                    "README's AGENTD_* variables, lower case, without the prefix"
                )

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        try:
            return super()._read_file(file_path)
        except tomllib.TOMLDecodeError as exc:
            raise InvalidSettings(f"{file_path} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise InvalidSettings(f"{file_path} cannot be read: {exc.strerror}") from None


def describe(exc: ValidationError, *, toml_file: Path, given: dict[str, str]) -> str:
    """One line per refused value, named where the user wrote it: ``given`` maps the
    settings passed on the command line to the flag that passed them (``--web``)."""
    lines = []
    for error in exc.errors():
        name = str(error["loc"][0]) if error["loc"] else ""
        lines.append(f"{_source(name, toml_file, given)}: {error['msg']}")
    return "\n".join(lines)


def _source(name: str, toml_file: Path, given: dict[str, str]) -> str:
    if name in given:
        return given[name]
    variable = f"{ENV_PREFIX}{name.upper()}"
    for key, value in os.environ.items():
        if key.upper() == variable:  # pydantic-settings reads them case-insensitively
            return f"{variable}={value!r}"
    return f"`{name}` in {toml_file}"
