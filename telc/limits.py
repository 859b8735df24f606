"""The limits telc puts on a program, each a located error (docs/tel.md, "Limits"): how deeply
expressions and statements nest, and how many digits a number has."""

from __future__ import annotations

from lark import Tree

from dlvm.diagnostics import Diagnostic, Location, Source

# How deeply one item's expressions and statements may nest: what a person writes stays far
# below (clang's default bracket depth is 256 too), and every walk of the syntax tree stays
# well within deep_stack. A chain of one operator (`a + b + c + …`) is one level, however long.
MAX_NESTING = 256
# The digits of a number literal: more than any number TEL holds (an i64 has 19, the largest
# f64 309 before its point, its shortest exact decimals a few dozen) would ever need.
MAX_DIGITS = 400

# The parse-tree nodes that make one level of nesting (grammar.lark's rule names): of an
# expression, operators, postfix forms, calls, aggregates and conditionals; of statements, those
# that open a block. Each counts on its own: an expression inside 200 nested `if`s may still
# nest 256 levels.
EXPRESSIONS = frozenset(
    {
        "binary", "unary", "transpose", "index", "call", "reshape", "conditional", "tuple",
        "concat",
    }
)  # fmt: skip
STATEMENTS = frozenset({"if_statement", "for_statement"})


def digits(number: str) -> int:
    """The significant digits of a number's text (`007.50e3`: 3), exponent aside."""
    mantissa = number.strip().lower().lstrip("+-").partition("e")[0]
    return sum(c.isdigit() for c in mantissa.lstrip("0._"))


def help_line(text: str) -> Diagnostic:
    """A `help:` line under a diagnostic, saying how to fix it."""
    return Diagnostic(f"  help: {text}", None, "detail")


def nesting_errors(tree: Tree, source: Source) -> list[Diagnostic]:
    """One diagnostic for each item of the parse tree whose expressions or statements nest
    deeper than MAX_NESTING, at the node one level too deep. The walk keeps its own stack, so it
    holds for any depth, before anything that recurses sees the tree."""
    diags = []
    for item in tree.children:
        if not isinstance(item, Tree):
            continue
        stack: list[tuple[Tree, int, int]] = [(item, 0, 0)]  # node, expression and statement depth
        while stack:
            node, expr, stmt = stack.pop()
            if node.data in STATEMENTS:
                expr, stmt = 0, stmt + 1
            elif node.data in EXPRESSIONS:
                expr += 1
            if max(expr, stmt) > MAX_NESTING:
                diags.append(_too_deep(node, source))
                break
            stack.extend((c, expr, stmt) for c in reversed(node.children) if isinstance(c, Tree))
    return diags


def _too_deep(node: Tree, source: Source) -> Diagnostic:
    statement = node.data in STATEMENTS
    what = "statements" if statement else "expression"
    start = node.meta.start_pos if not node.meta.empty else 0
    fix = (
        "move the inner statements into a function"
        if statement
        else "give a part of it a name: `let` in a function, a `hidden` declaration in a model"
    )
    return Diagnostic(
        f"{what} nested deeper than {MAX_NESTING} levels",
        Location(source, start),
        notes=(help_line(fix),),
    )
