"""Text that came from outside, as the CLI shows it (DESIGN.md, "What people read":
nothing from outside steers the terminal).

Names, messages, reasons, paths, actors, targets and answers come from task files, user
services, callers and the database. A control character among them (``ESC [ 8 m`` hides
every line after it; a carriage return or a backspace writes over what came before; a
bidirectional override turns text around) is written out, ``\\x1b``, ``\\n``, ``\\u202e``,
never sent to the terminal raw. Every path of the CLI that prints such text goes through
``markup`` (rich markup: also escaped) or ``plain`` (click.echo).
"""

from __future__ import annotations

import json
import re
from typing import Any

from rich.markup import escape

#: C0 and C1 control characters, DEL, and the invisible marks that move or reorder text
#: (zero-width and bidirectional marks, embeddings, overrides and isolates, the line and
#: paragraph separators, the byte order mark).
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
#: What JSON leaves raw of those (it writes out only U+0000 to U+001F).
_RAW_IN_JSON = re.compile("[\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _written_out(match: re.Match[str]) -> str:
    char = match[0]
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def plain(value: Any) -> str:
    """``value`` as text with its control characters written out (``\\x1b``), for output
    that is not rich markup."""
    text = value if isinstance(value, str) else str(value)
    return _CONTROL.sub(_written_out, text)


def markup(value: Any) -> str:
    """``value`` as rich markup that prints it as it is: control characters written out
    and markup (``[red]``) escaped."""
    return escape(plain(value))


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON (non-ASCII letters kept) whose every control character is escaped:
    JSON itself escapes U+0000 to U+001F, this also the others (``\\u009b``, ``\\u202e``)."""
    text = json.dumps(value, indent=indent, ensure_ascii=False)
    return _RAW_IN_JSON.sub(lambda match: f"\\u{ord(match[0]):04x}", text)
