"""The judge's on/off switches from its environment, read one way: "1" on, "0" off, unset the
switch's own default, anything else an error naming the variable that the operator sees at once."""

from __future__ import annotations


def on_off(name: str, setting: str, unset: bool, unset_means: str) -> bool:
    """Switch ``name``'s ``setting`` (its environment value, "" when unset) as a bool; ``unset`` is the
    default and ``unset_means`` says it in the error (e.g. "on a GPU only")."""
    setting = setting.strip()
    if setting == "":
        return unset
    if setting in ("0", "1"):
        return setting == "1"
    raise ValueError(f"{name}={setting!r}: expected 0 or 1 (unset: {unset_means})")
