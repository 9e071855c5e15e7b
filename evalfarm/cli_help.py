"""How the `evalfarm` commands print their options: each default once, and only a real one."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to an option whose default is a value, unless its help already says
    its default. None (an option left out, whose meaning the help states) and False (a switch)
    add nothing, so no option reads "(default: None)"."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "(default" in text or "%(default)" in text or not action.option_strings:
            return text
        if action.default in (None, False, argparse.SUPPRESS):
            return text
        return text + " (default: %(default)s)"
