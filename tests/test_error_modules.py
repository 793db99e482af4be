"""The error tree is one package, each branch a module of its own: every error any branch
defines is importable from :mod:`shared.errors` itself, the one name callers use."""

from __future__ import annotations

import importlib
import pkgutil

import shared.errors


def test_every_error_of_every_branch_is_exported_by_the_package() -> None:
    defined = {
        name
        for branch in pkgutil.iter_modules(shared.errors.__path__, "shared.errors.")
        for name, value in vars(importlib.import_module(branch.name)).items()
        if isinstance(value, type)
        and issubclass(value, Exception)
        and value.__module__ == branch.name
    }
    assert len(defined) > 50
    assert defined == set(shared.errors.__all__)
    assert all(getattr(shared.errors, name).__name__ == name for name in defined)
