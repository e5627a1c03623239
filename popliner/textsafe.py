"""Names from a profile, shown where a character could do more than show itself.

Layer, operation, variable and file names come from the user's files. On a
terminal an ESC or OSC sequence recolours, retitles or clears the screen, a
NUL or CR hides what came before, a right-to-left override (U+202E) or
isolate reorders the line, a newline or U+2028 forges a line of its own. In
XML most control characters are not allowed at all. So every character that
is not printable (:meth:`str.isprintable`: the control, format, separator,
surrogate, private-use and unassigned categories, and every space but the
plain one) is shown as the escape Python would write for it (``\\n``,
``\\x1b``, ``\\u202e``). Printable text, any script included, is left alone.
"""

from __future__ import annotations

__all__ = ["shell_word", "shown", "shown_lines"]


def _escape(char: str) -> str:
    return repr(char)[1:-1]  # '\n' -> \n, '\x1b' -> \x1b, '\u202e' -> \u202e


def shown(text: str) -> str:
    """``text`` on one line with every non-printable character escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape(c) for c in text)


def shown_lines(text: str) -> str:
    """Like :func:`shown`, but the text's own line breaks (``\\n``) stay line breaks."""
    if text.isprintable():
        return text
    return "\n".join(shown(line) for line in text.split("\n"))


def shell_word(text: str) -> str:
    """``text`` quoted for a POSIX shell, visibly: bash's ``$'...'`` with escapes when it is not printable."""
    import shlex

    if text.isprintable():
        return shlex.quote(text)
    body = "".join(c if c.isprintable() and c not in "\\'" else ("\\" + c if c in "\\'" else _bash_escape(c))
                   for c in text)
    return f"$'{body}'"


def _bash_escape(char: str) -> str:
    code = ord(char)
    if code < 0x80:  # bash's \xHH is a byte; above ASCII only \u gives the character
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
