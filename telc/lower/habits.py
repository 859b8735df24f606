"""What a PyTorch or NumPy habit means in TEL: the keyword names those libraries use for
what TEL calls otherwise (`lr:` for `rate:`, `dim:` for `axis:`), turned into the `help:` line
of an unknown-keyword error, or else the closest name by edit distance."""

from __future__ import annotations

from collections.abc import Sequence

from telc.program import suggest

# A PyTorch or NumPy keyword, TEL's name for it, and what it is (for the help line).
KEYWORDS: dict[str, tuple[str, str]] = {
    "lr": ("rate", "the learning rate"),
    "learning_rate": ("rate", "the learning rate"),
    "dim": ("axis", "the axis"),
    "keepdim": ("keepdims", "the flag that keeps reduced axes"),
}


def unknown_keyword(name: str, names: Sequence[str], callee: str) -> tuple[str, list[str]]:
    """For a keyword `name` that `callee` does not take (its keywords: `names`): the suffix of
    the error message ("; did you mean 'x'?" or nothing) and its detail lines (a `help:` line
    for a habit of PyTorch or NumPy)."""
    habit = KEYWORDS.get(name)
    if habit is None:
        return suggest(name, names), []
    tel, what = habit
    if tel in names:
        return "", [f"  help: {what} is `{tel}:`"]
    takes = ", ".join(names) if names else "nothing by keyword"
    return "", [
        f"  help: `{name}:` is PyTorch's name for {what}, `{tel}:` in TEL, which {callee} does "
        f"not take; it takes {takes}"
    ]
