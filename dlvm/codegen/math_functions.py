"""Which function computes a float math operation for a type: an LLVM intrinsic where LLVM has
one (vectorisable), the C math library's otherwise (glibc: ≤ 1 ulp for most, a few ulp for
some), and in a GPU module libdevice's where the NVPTX back end has no instruction."""

from __future__ import annotations

from llvmlite import ir

from dlvm.codegen.errors import CodegenError

# Intrinsics LLVM lowers itself (vectorisable); the rest come from libm by name.
_INTRINSIC = {
    "sqrt": "llvm.sqrt",
    "exp": "llvm.exp",
    "log": "llvm.log",
    "sin": "llvm.sin",
    "cos": "llvm.cos",
    "tan": "llvm.tan",
    "asin": "llvm.asin",
    "acos": "llvm.acos",
    "atan": "llvm.atan",
    "sinh": "llvm.sinh",
    "cosh": "llvm.cosh",
    "tanh": "llvm.tanh",
    "floor": "llvm.floor",
    "ceil": "llvm.ceil",
    "round": "llvm.round",
    "rint": "llvm.rint",
    "fabs": "llvm.fabs",
    "copysign": "llvm.copysign",
    "minimum": "llvm.minimum",
    "maximum": "llvm.maximum",
    "pow": "llvm.pow",
}
_LIBM = {"erf": "erf", "erfc": "erfc", "lgamma": "lgamma", "log1p": "log1p"}
# In a GPU module (nvptx64), the operations the NVPTX back end cannot lower itself call
# libdevice, NVIDIA's math library as LLVM bitcode, linked in by dlvm.codegen.cuda:
# `__nv_expf` for f32, `__nv_exp` for f64 (f16 is computed in f32).
_LIBDEVICE = frozenset(
    ["exp", "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "pow",
     "erf", "erfc", "lgamma", "log1p", "round"]
)  # fmt: skip


def _suffix(t: ir.Type) -> str:
    return {"half": "f16", "float": "f32", "double": "f64"}[str(t)]


def call_math(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    """An intrinsic (`llvm.exp.f32`) or, without one, the libm function for the type; in a
    GPU module, libdevice's where NVPTX has no instruction."""
    module = b.module
    t = args[0].type
    if name in _LIBDEVICE and module.triple.startswith("nvptx"):
        if str(t) == "half":
            wide = [b.fpext(a, ir.FloatType()) for a in args]
            return b.fptrunc(call_math(b, name, wide), t)
        fname = f"__nv_{name}" + ("f" if str(t) == "float" else "")
    elif name in _INTRINSIC:
        fname = f"{_INTRINSIC[name]}.{_suffix(t)}"
    elif name in _LIBM:
        if str(t) == "half":  # libm has no half functions: compute in float
            wide = [b.fpext(a, ir.FloatType()) for a in args]
            return b.fptrunc(call_math(b, name, wide), t)
        fname = _LIBM[name] + ("f" if str(t) == "float" else "")
    else:
        raise CodegenError(f"no math function '{name}'")
    fn = module.globals.get(fname)
    if fn is None:
        fn = ir.Function(module, ir.FunctionType(t, [a.type for a in args]), fname)
    return b.call(fn, args)


def truncate(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """x rounded toward zero (`llvm.trunc`), in every module: NVPTX has an instruction for it."""
    fname = f"llvm.trunc.{_suffix(x.type)}"
    fn = b.module.globals.get(fname) or ir.Function(
        b.module, ir.FunctionType(x.type, [x.type]), fname
    )
    return b.call(fn, [x])
