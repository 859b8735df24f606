"""lit configuration: `.dl` files with RUN lines; dlopt, dlc and filecheck come from PATH (the
Makefile puts the project's virtual environment first)."""

import os

import lit.formats

config.name = "dlvm"  # noqa: F821
# lit's internal shell (as in LLVM): it provides `not` for tests that expect a failure.
config.test_format = lit.formats.ShTest(execute_external=False)  # noqa: F821
config.suffixes = [".dl", ".tel"]  # noqa: F821
config.test_source_root = os.path.dirname(__file__)  # noqa: F821
config.excludes = ["Inputs"]  # noqa: F821
config.environment["PATH"] = os.environ["PATH"]  # noqa: F821
config.environment["NO_COLOR"] = "1"  # noqa: F821
config.substitutions.append(("%samples", os.path.join(os.path.dirname(__file__), "..", "..", "samples")))  # noqa: E501, F821
