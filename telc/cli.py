"""The `telc` command: `telc build` (any stage, -O0/-O1/-O2, --target, the build cache, progress
and timings), `telc check`, `telc run` (an entry point of the built model on .npy inputs) and
`telc cache`; `telc FILE …` is short for `telc build FILE …`. Progress, timings and diagnostics
go to stderr; stdout carries only what was asked for (--emit text, run's outputs). Exit status:
EXIT_STATUS below, also in `telc --help` and docs/telc.md."""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from dlvm.codegen.gpus import DEFAULT_GPU, GPUS
from dlvm.diagnostics import BuildFailure, DiagnosticError
from dlvm.tools.driver import EXIT_INPUT, EXIT_USAGE, internal_error_message, report
from telc import __version__
from telc.cache import Cache, compiler_version, write_atomically
from telc.demo import demo
from telc.driver import (
    DEFAULT_OPT_LEVEL,
    OPT_LEVELS,
    PRECISIONS,
    QUANTIZE_SCHEMES,
    STAGES,
    TARGETS,
    BuildOptions,
    compile_text,
    optimize,
    parse_define,
    parse_defines,
    shown_define,
)
from telc.onnx_use import OnnxOptions, Training
from telc.progress import Progress, console
from telc.types import DTYPES

T = TypeVar("T")

EXIT_INTERNAL = 3
EXIT_INTERRUPTED = 130

EXIT_STATUS = """\b
Exit status:
  0    success
  1    the input was rejected (located diagnostics on stderr), or the build or run failed
  2    bad usage: an unknown command or option, a malformed value
  3    an internal error, a bug in telc (TELC_TRACEBACK=1 shows where it happened)
  130  interrupted"""

GROUP_EPILOG = f"""\b
Examples:
  telc check model.tel                      # report every error, build nothing
  telc build model.tel -o build/model.so    # model.so, model.h and dlrt.h
  telc model.tel --emit optimized -O1       # IR after differentiation and -O1
  telc run model.tel --input x=x.npy        # build if needed, run infer, print y

\b
Environment:
  TELC_CACHE_DIR   the build cache (default $XDG_CACHE_HOME/telc or ~/.cache/telc)
  DLVM_CACHE_DIR   the compiler's own cache: the C runtime's objects, the parser's tables
                   (default $XDG_CACHE_HOME/dlvm or ~/.cache/dlvm)
  CC               the C compiler that links libraries (default cc)
  NO_COLOR         no colour even on a terminal (colour is only ever used on one)

{EXIT_STATUS}

Each command has its own --help. The reference is docs/telc.md."""

_LEVELS = " ".join(f"-O{n}: {lvl.summary}." for n, lvl in OPT_LEVELS.items())


class _Group(click.Group):
    """Treats `telc model.tel …` as `telc build model.tel …`; a word that is neither a command
    nor a file nor a .tel name (`telc chek m.tel`) stays a command, which click reports as
    unknown with a suggestion."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        first = args[0] if args else ""
        is_file = first.endswith(".tel") or os.path.sep in first or os.path.exists(first)
        if first and first not in self.commands and not first.startswith("-") and is_file:
            args = ["build", *args]
        return super().parse_args(ctx, args)


@click.group(
    name="telc",
    cls=_Group,
    help="Compile TEL models into native libraries, check them, run them. "
    "The IR tools are dlopt and dlc.",
    epilog=GROUP_EPILOG,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="telc", message="%(prog)s %(version)s")
def cli() -> None:
    pass


def _defines(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    for item in value:
        try:
            parse_define(item)
        except ValueError as e:
            malformed = str(e).startswith("expected")
            reason = " is not NAME=NUMBER (such as -D B=64)" if malformed else f": {e}"
            raise click.BadParameter(f"'{shown_define(item)}'{reason}") from None
    return tuple(parse_defines(list(value)).items())


def _dims(text: str) -> tuple[int, ...] | None:
    """`1x3x224x224` as a shape (`scalar` for []), None if it is not one."""
    if text == "scalar":
        return ()
    parts = text.split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _shapes(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    given: dict[str, tuple[int, ...]] = {}
    for item in value:
        name, sep, text = item.partition("=")
        dims = _dims(text)
        if not sep or not name or dims is None:
            raise click.BadParameter(f"'{item}' is not NAME=SHAPE (such as --shape x=1x3x224x224)")
        if name in given:
            raise click.BadParameter(f"the shape of '{name}' is given twice")
        given[name] = dims
    return tuple(given.items())


def _values(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    given: dict[str, str] = {}
    for item in value:
        name, sep, text = item.partition("=")
        if not sep or not name or not text:
            raise click.BadParameter(
                f"'{item}' is not NAME=VALUE (such as --value axes=0,1 or --value w=@w.npy)"
            )
        if name in given:
            raise click.BadParameter(f"the value of '{name}' is given twice")
        given[name] = text
    return tuple(given.items())


def _labels(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    parts = value.split(":")
    dims = _dims(parts[1]) if len(parts) in (2, 3) else None
    dtype = parts[2] if len(parts) == 3 else None
    if dims is None or not parts[0].isidentifier() or (dtype is not None and dtype not in DTYPES):
        raise click.BadParameter(
            f"'{value}' is not NAME:SHAPE or NAME:SHAPE:DTYPE (such as labels:16x10:f32)"
        )
    return parts[0], dims, dtype


def _inputs(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> Any:
    given: dict[str, str] = {}
    for item in value:
        name, sep, path = item.partition("=")
        if not sep or not name.isidentifier() or not path:
            raise click.BadParameter(f"'{item}' is not NAME=FILE (such as --input x=x.npy)")
        if name in given:
            raise click.BadParameter(f"input '{name}' is given twice")
        given[name] = path
    return given


def _quantize(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is not None and value not in QUANTIZE_SCHEMES:
        known = ", ".join(QUANTIZE_SCHEMES)
        raise click.BadParameter(f"'{value}' is not a quantisation scheme (known: {known})")
    return value


def _in_range(low: int, high: int) -> Callable[[click.Context, click.Parameter, int], int]:
    def check(ctx: click.Context, param: click.Parameter, value: int) -> int:
        if not low <= value <= high:
            raise click.BadParameter(f"{value} is not in the range {low} to {high}")
        return value

    return check


def _options(*decorators: Callable[[Any], Any]) -> Callable[[T], T]:
    def apply(f: T) -> T:
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply


_define = click.option(
    "-D",
    "defines",
    multiple=True,
    metavar="NAME=VALUE",
    callback=_defines,
    help="Override a dim or const (repeatable).",
)
_quiet = click.option("-q", "--quiet", is_flag=True, help="Print nothing but errors.")
_verbose = click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also say what the build did: options, sources, cache key, each pass (changed or "
    "not), kernels, frame sizes, entry points.",
)


# The BuildOptions fields that a command line option of the same name gives, besides -D and -O.
CODEGEN_OPTIONS = (
    "target",
    "cpu",
    "gpu",
    "tf32",
    "distributed",
    "fast_math",
    "precision",
    "quantize",
)


def _gather_build_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Hands a command its -D and code-generation options as one BuildOptions, `options`
    (they are the build's cache key, and every command that builds takes them all)."""

    @functools.wraps(f)
    def command(**kwargs: Any) -> Any:
        defines, level = tuple(kwargs.pop("defines")), int(kwargs.pop("level"))
        named = {n: kwargs.pop(n) for n in CODEGEN_OPTIONS}
        if named["quantize"] is not None and named["target"] == "cuda":
            raise click.BadParameter(
                "int8 products are built for the CPU only, not with --target cuda "
                "(docs/quantization.md)",
                param_hint="'--quantize'",
            )
        return f(options=BuildOptions(defines, level, **named), **kwargs)

    return command


# The code-generation options (with -D, `_define`, which a command that takes these takes too).
_codegen = _options(
    click.option(
        "-O",
        "level",
        type=click.Choice([str(n) for n in OPT_LEVELS]),
        default=str(DEFAULT_OPT_LEVEL),
        show_default=True,
        help=f"Optimisation level. {_LEVELS}",
    ),
    click.option(
        "--target",
        type=click.Choice(TARGETS),
        default="cpu",
        show_default=True,
        help="What to generate code for: cpu, or cuda (the CPU code and CUDA kernels beside it; "
        'models created on "cuda:N" run there).',
    ),
    click.option(
        "--gpu",
        type=click.Choice(GPUS),
        default=DEFAULT_GPU,
        show_default=True,
        help="The CUDA architecture of --target cuda and --emit ptx.",
    ),
    click.option(
        "--tf32",
        is_flag=True,
        help="On the GPU, compute f32 matrix products on tensor cores in TF32 (inputs rounded to "
        "10 bits of mantissa, f32 sums), as cuBLAS does when TF32 is allowed.",
    ),
    click.option(
        "--fast-math",
        is_flag=True,
        help="Compute f32 exp, tanh (so nn's sigmoid) and log in CPU kernels with faster "
        "approximations: within 2e-6 relative of the exact result instead of 2 ulp (docs/ir.md, "
        '"Fast math"). f64 and the other functions are unchanged.',
    ),
    click.option(
        "--precision",
        type=click.Choice(PRECISIONS),
        default="f32",
        show_default=True,
        help="What train steps compute in: f32, or bf16 (products and activations in bf16, "
        'sums, the loss, parameters and optimiser state in f32; docs/telc.md, "Mixed '
        'precision").',
    ),
    click.option(
        "--quantize",
        metavar="SCHEME",
        callback=_quantize,
        help="int8: infer entries compute each product by a parameter (x . W) with int8 "
        "weights, per output channel, and int8 activations, per row, summed in i32 "
        "(docs/quantization.md). Train entries and the parameters stay f32.",
    ),
    click.option(
        "--cpu", default="native", show_default=True, help="Target CPU: native, x86-64-v3, znver4…"
    ),
    click.option(
        "--distributed",
        is_flag=True,
        help="Also build each train step in two halves, so that processes training the model "
        "together can sum its gradients between them (NAME_set_allreduce; "
        "docs/distributed.md).",
    ),
    click.option(
        "--no-cache",
        is_flag=True,
        help="Neither use nor fill the build cache of finished builds (TELC_CACHE_DIR, else "
        "~/.cache/telc). The compiler's own cache of what depends on no model (DLVM_CACHE_DIR: "
        "the C runtime's objects, the parser's tables) is still used.",
    ),
    _gather_build_options,
)


_onnx = _options(
    click.option(
        "--shape",
        "shapes",
        multiple=True,
        metavar="NAME=SHAPE",
        callback=_shapes,
        help="An ONNX model's input shape (such as x=1x3x224x224; repeatable). Without it, a "
        "dynamic dimension is a dim of the model, 1 unless -D sets it.",
    ),
    click.option(
        "--value",
        "values",
        multiple=True,
        metavar="NAME=VALUE",
        callback=_values,
        help="Fix an ONNX model's input to a value at build time, so that the import knows it "
        "(a Reshape target, reduction axes or Pad's pads given as inputs) and the library no "
        "longer takes it: numbers in the input's element type and shape, comma-separated (a "
        "scalar as one number), or @FILE.npy; repeatable. Also for a TEL model that uses an "
        "ONNX model.",
    ),
    click.option(
        "--train-loss",
        metavar="LOSS",
        help="Add a train entry to an ONNX model: LOSS (a def of nn such as "
        "softmax_cross_entropy, sparse_softmax_cross_entropy or mse) of its first output and "
        "--labels, minimised by --optimizer.",
    ),
    click.option(
        "--labels",
        metavar="NAME:SHAPE[:DTYPE]",
        callback=_labels,
        help="The labels input of --train-loss (such as labels:16x10 or targets:16:i64).",
    ),
    click.option(
        "--optimizer",
        default="adam()",
        show_default=True,
        metavar="OPT",
        help="The optimiser of --train-loss, a def of optim with its arguments (such as "
        "'sgd(rate: 0.1)').",
    ),
)


def _onnx_options(
    file: str, shapes: Any, values: Any, train_loss: str | None, labels: Any, optimizer: str
) -> OnnxOptions | None:
    """What `telc build model.onnx` adds (for a TEL model, only the --value of the ONNX models
    it uses); a usage error for options that need an ONNX model or each other."""
    if not file.endswith(".onnx"):
        if shapes or train_loss or labels:
            raise click.UsageError("--shape, --train-loss and --labels are for ONNX models")
        return OnnxOptions(values=values) if values else None
    if (train_loss is None) != (labels is None):
        raise click.UsageError("--train-loss and --labels go together")
    training = None
    if train_loss is not None:
        name, dims, dtype = labels
        training = Training(train_loss, name, dims, dtype, optimizer)
    return OnnxOptions(shapes, training, values)


def _chatter(quiet: bool, verbose: bool) -> None:
    if quiet and verbose:
        raise click.UsageError("-q and -v cannot be used together")


@cli.command(
    short_help="Report every error in a model; build nothing.",
    help="Check FILE: parse it and the modules it uses, check names, shapes and element types, "
    "lower it to IR and differentiate it; writes nothing. Errors are reported as "
    "file:line:col diagnostics; on success one line says what the model has.",
    epilog="\b\nExamples:\n  telc check model.tel\n  telc check model.tel -D B=1 -q\n\n"
    + EXIT_STATUS,
)
@click.argument("file")
@_define
@_quiet
@_onnx
def check(
    file: str,
    defines: Any,
    quiet: bool,
    shapes: Any,
    values: Any,
    train_loss: str | None,
    labels: Any,
    optimizer: str,
) -> None:
    onnx = _onnx_options(file, shapes, values, train_loss, labels, optimizer)

    def work() -> Any:
        from telc.build import model_text

        values = dict(onnx.values) if onnx is not None else None
        compiled = compile_text(*model_text(file, onnx), dict(defines), values=values)
        optimize(compiled.module, level=0)
        return compiled

    compiled = _guard(work)
    if quiet:
        return
    entries = [e.name for e in compiled.interface.entries if e.kind != "init"]
    params = len(compiled.interface.params)
    console().print(
        f"telc: {file}: ok (module {compiled.interface.name}; entries "
        f"{', '.join(entries) or 'none'}; {params} parameter{'s' * (params != 1)})",
        soft_wrap=True,
    )


@cli.command(
    short_help="Compile a model to a library or any stage (the default command).",
    help="Compile FILE and write the chosen stage. Building a library (the default) shows "
    "each stage's time on stderr; an unchanged model is taken from the build cache.",
    epilog="""\b
Examples:
  telc build model.tel                       # model.so, model.h, dlrt.h here
  telc build model.tel -o out/m.so -D B=1    # batch size 1
  telc build model.tel --emit ir             # raw DLVM IR on stdout
  telc build model.tel --emit optimized -O0  # only differentiated
  telc build model.tel --emit llvm -o m.ll
  telc build model.tel --emit ptx --gpu sm_80 # the CUDA kernels for an A100
  telc build model.tel -v --no-cache         # every pass and kernel, built afresh
  telc build lenet.onnx -D batch=16          # an ONNX model, its dynamic batch 16
  telc build lenet.onnx --emit tel           # the TEL model it is built as
  telc build lenet.onnx --train-loss softmax_cross_entropy --labels labels:16x10 \\
      --optimizer 'adam(rate: 1e-3)' -D batch=16

"""
    + EXIT_STATUS,
)
@click.argument("file")
@click.option(
    "--emit",
    type=click.Choice(STAGES),
    default="so",
    show_default=True,
    help="ast: the syntax tree; ir: raw DLVM IR; optimized: IR after differentiation and "
    "the -O level's passes; compute: with kernels outlined; schedule: with schedules; llvm: "
    "optimised LLVM IR; asm: the machine code as assembly; ptx: the CUDA kernels as PTX for "
    "--gpu; obj: the object file (needs -o or a pipe); so: a shared library NAME.so with NAME.h "
    "and dlrt.h beside it.",
)
@click.option(
    "-o", "output", metavar="OUT", help="Write to OUT (for so: default FILE's stem + .so)."
)
@_codegen
@_define
@_quiet
@_verbose
@_onnx
def build(
    file: str,
    emit: str,
    output: str | None,
    options: BuildOptions,
    no_cache: bool,
    quiet: bool,
    verbose: bool,
    shapes: Any,
    values: Any,
    train_loss: str | None,
    labels: Any,
    optimizer: str,
) -> None:
    _chatter(quiet, verbose)
    onnx = _onnx_options(file, shapes, values, train_loss, labels, optimizer)
    if emit == "obj" and not output and sys.stdout.isatty():
        raise click.UsageError("--emit obj writes binary: give -o FILE.o (or a pipe)")
    progress = Progress(quiet, verbose)  # stderr only: stdout carries the emitted text
    library = Path(output or Path(file).stem + ".so") if emit == "so" else None
    warnings: list[str] = []

    def work() -> Any:
        from telc.build import produce

        with progress:
            return produce(
                file,
                emit,
                options,
                library,
                progress.timings,
                _cache(no_cache),
                warnings.append,
                onnx,
            )

    product = _guard(work)
    _warn(warnings, quiet)
    progress.details(product.report, options.flags(), product.cached)
    if emit == "so":
        progress.summary(product.library, product.header, product.cached)
        return
    data = product.data
    if output:
        raw = data.encode("utf-8") if isinstance(data, str) else data
        try:
            write_atomically(Path(output), raw)
        except OSError as e:
            click.echo(f"telc: cannot write {output}: {e.strerror}", err=True)
            sys.exit(EXIT_INPUT)
    elif isinstance(data, bytes):
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
    else:
        click.echo(data, nl=False)


@cli.command(
    short_help="Run an entry point of a model on .npy inputs.",
    help="Build FILE (or take it from the build cache), create the model with random "
    "parameters from --seed, run one entry point on inputs read from .npy files, and print "
    "its outputs (large tensors summarised) or save them with -o. Inputs are checked against "
    "the entry's names, shapes and element types; a float64 array is accepted for f32. A "
    "train entry runs --steps times on the same inputs and prints each step's loss.",
    epilog="""\b
Examples:
  telc run model.tel --input x=x.npy
  telc run model.tel --input x=x.npy -o y.npz         # all outputs in one archive
  telc run model.tel --input x=x.npy -o outputs/      # outputs/y.npy, …
  telc run model.tel --entry train_step --input x=x.npy --input labels=l.npy \\
      --steps 100 --save params.safetensors
  telc run model.tel --load params.safetensors --input x=x.npy

"""
    + EXIT_STATUS,
)
@click.argument("file")
@click.option("--entry", metavar="NAME", help="The entry point to run (default infer).")
@click.option(
    "--input",
    "inputs",
    multiple=True,
    metavar="NAME=FILE",
    callback=_inputs,
    help="An input of the entry from a .npy file (or an .npz holding NAME); repeatable.",
)
@click.option(
    "-o",
    "--output",
    metavar="OUT",
    help="Save the outputs instead of printing them: OUT.npz holds all, any other OUT is a "
    "directory that gets NAME.npy per output.",
)
@click.option(
    "--seed", type=int, metavar="N", default=0, show_default=True,
    callback=_in_range(0, 2**64 - 1),
    help="The random stream that initialises the parameters.",
)  # fmt: skip
@click.option(
    "--steps", type=int, metavar="N", default=1, show_default=True,
    callback=_in_range(1, 2**63 - 1),
    help="How many times a train entry runs.",
)  # fmt: skip
@click.option("--load", "checkpoint", metavar="FILE", help="Load parameters saved by --save.")
@click.option("--save", metavar="FILE", help="Save the parameters after the run (safetensors).")
@click.option(
    "--device",
    default="cpu",
    show_default=True,
    metavar="DEVICE",
    help="Where the model runs: cpu, or cuda:N (which builds with --target cuda).",
)
@_codegen
@_define
@_quiet
@_verbose
@_onnx
def run(
    file: str,
    entry: str | None,
    inputs: dict[str, str],
    output: str | None,
    seed: int,
    steps: int,
    checkpoint: str | None,
    save: str | None,
    device: str,
    options: BuildOptions,
    no_cache: bool,
    quiet: bool,
    verbose: bool,
    shapes: Any,
    values: Any,
    train_loss: str | None,
    labels: Any,
    optimizer: str,
) -> None:
    from telc import run as running

    _chatter(quiet, verbose)
    onnx = _onnx_options(file, shapes, values, train_loss, labels, optimizer)
    if device.startswith("cuda"):
        options = dataclasses.replace(options, target="cuda")  # the library must hold the kernels
    progress = Progress(quiet, verbose)
    warnings: list[str] = []
    err = console()

    def work() -> None:
        from telc.build import produce

        with tempfile.TemporaryDirectory(prefix="telc-run-") as scratch:
            library = Path(scratch) / (Path(file).stem + ".so")  # a copy of the cached build
            with progress:
                product = produce(
                    file, "so", options, library, progress.timings, _cache(no_cache),
                    warnings.append, onnx,
                )  # fmt: skip
            _warn(warnings, quiet)
            progress.details(product.report, options.flags(), product.cached)
            if not product.cached and not quiet:
                err.print(f"telc: built {file} in {progress.total:.2f} s", soft_wrap=True)
            chosen, outputs = running.execute(
                library,
                entry,
                inputs,
                seed,
                steps,
                checkpoint,
                save,
                _steps(steps, quiet, err),
                device,
            )
        if output is None:
            running.show(console(stderr=False), chosen, outputs)
            return
        written = running.save(outputs, Path(output))
        if not quiet:
            err.print(f"telc: wrote {', '.join(map(str, written))}", soft_wrap=True)

    _guard(work, running.RunError)


def _steps(steps: int, quiet: bool, err: Console) -> Callable[[int, float], None]:
    """Prints a train entry's loss at about ten steps spread over the run (each one when
    there are few), the first and the last always."""
    every = max(1, steps // 10)

    def done(step: int, loss: float) -> None:
        if steps > 1 and not quiet and (step % every == 0 or step in (1, steps)):
            err.print(f"step {step:>{len(str(steps))}}  loss {loss:.6g}", soft_wrap=True)

    return done


@cli.command(
    name="cache",
    short_help="Show or clear the build cache.",
    help="Show where the build cache is, how many builds it holds and their size; --clear "
    "empties it. Entries are keyed by the sources, the options and the compiler version, so "
    "a stale entry is never used; the least recently used beyond 128 are removed.",
)
@click.option("--clear", is_flag=True, help="Remove every cached build.")
def cache_command(clear: bool) -> None:
    store = Cache()
    if clear:
        removed = store.clear()
        click.echo(f"telc: removed {removed} cached build{'s' * (removed != 1)} from {store.root}")
        return
    entries = store.entries()
    click.echo(f"{store.root}: {len(entries)} build{'s' * (len(entries) != 1)}, "
               f"{store.size() / (1024 * 1024):.1f} MiB ({compiler_version()})")  # fmt: skip


def _cache(no_cache: bool) -> Cache | None:
    return None if no_cache else Cache()


def _warn(warnings: list[str], quiet: bool) -> None:
    if not quiet:
        for message in dict.fromkeys(warnings):
            click.echo(f"telc: warning: {message}; building without the cache", err=True)


def _guard(work: Callable[[], T], *refused: type[Exception]) -> T:
    """Runs `work`, turning every failure into its message and exit status (EXIT_STATUS)."""
    try:
        return work()
    except DiagnosticError as e:
        report(e.diagnostics)
        sys.exit(EXIT_INPUT)
    except BuildFailure as e:
        click.echo(f"telc: cannot build: {e}", err=True)
        sys.exit(EXIT_INPUT)
    except refused as e:
        click.echo(f"telc: cannot run: {e}", err=True)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt:
        click.echo("telc: interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:
        if os.environ.get("TELC_TRACEBACK"):  # our bug, not the user's: no traceback unless asked
            raise
        click.echo(internal_error_message("telc", e, "TELC_TRACEBACK"), err=True)
        sys.exit(EXIT_INTERNAL)


cli.add_command(demo)  # `telc demo`, what `make demo` runs


def main() -> None:
    # Most of what telc makes (syntax trees, IR, LLVM IR) lives until it exits: the cyclic
    # garbage collector's passes over it cost 0.2 s of a 2 s build, and its last one, at exit,
    # as much again. So it runs rarely, and not over what is left at the end.
    gc.set_threshold(100_000, 50, 100)
    try:
        cli()
    finally:
        gc.freeze()


__all__ = ["EXIT_INPUT", "EXIT_INTERNAL", "EXIT_USAGE", "cli", "main"]
