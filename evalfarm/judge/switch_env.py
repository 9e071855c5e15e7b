"""The judge's switches from its environment, each read one way: on/off ("1" on, "0" off) or a size
in MiB; unset the switch's own default, anything else an error naming the variable that the
operator sees at once."""

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


def mebibytes(name: str, setting: str, unset: int, zero_means: str = "") -> int:
    """Switch ``name``'s ``setting`` (its environment value, "" when unset), a whole number of MiB, in
    bytes; ``unset`` (bytes) where it is unset. "0" is allowed only where ``zero_means`` says what it
    does (e.g. "off"); otherwise the number must be positive."""
    setting = setting.strip()
    if not setting:
        return unset
    if not setting.isdigit() or (int(setting) == 0 and not zero_means):
        want = f"a number of MiB (0: {zero_means})" if zero_means else "a positive number of MiB"
        raise ValueError(f"{name}={setting!r}: want {want}")
    return int(setting) << 20
