"""LLGen: a module at stage schedule as one LLVM module (llvmlite, opaque pointers), optimised
and compiled to an object for the host CPU or a `--cpu` target."""

from __future__ import annotations

import functools

import llvmlite.binding as llvm
from llvmlite import ir

from dlvm.codegen.host import HostGen, Runtime, host_function
from dlvm.codegen.kernel import KernelGen
from dlvm.codegen.scalar import CodegenError
from dlvm.codegen.spec import host_symbol
from dlvm.ir.values import Function, Module

TRIPLE = "x86_64-unknown-linux-gnu"


def llvm_module(module: Module) -> ir.Module:
    """The LLVM IR of every function: kernels and host functions (`dl_<name>`)."""
    if module.stage != "schedule":
        raise CodegenError(f"code generation needs stage schedule, found stage {module.stage}")
    m = ir.Module(name=module.name)
    m.triple = TRIPLE
    rt = Runtime.declare(m)
    kernels: dict[Function, ir.Function] = {}
    hosts: dict[Function, ir.Function] = {}
    for fn in module.functions:
        if not fn.blocks or fn.is_declaration:
            continue
        if fn.compute:
            kernels[fn] = KernelGen(m, fn, "k." + host_symbol(fn.name)[3:], rt.parallel_for).emit()
        else:
            hosts[fn] = host_function(m, fn)
    for fn in hosts:
        HostGen(m, fn, rt, kernels, hosts).emit()
    return m


@functools.cache
def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


def target_machine(cpu: str = "native", opt: int = 3) -> llvm.TargetMachine:
    """`native` is this machine's CPU and features; anything else an LLVM CPU name
    (`x86-64-v3`, `skylake-avx512`)."""
    _initialise()
    target = llvm.Target.from_triple(TRIPLE)
    if cpu == "native":
        name, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    else:
        name, features = cpu, ""
    return target.create_target_machine(
        cpu=name, features=features, opt=opt, reloc="pic", codemodel="default"
    )


def optimise(mod: llvm.ModuleRef, tm: llvm.TargetMachine, level: int = 3) -> None:
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2
    pto.slp_vectorization = level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    pm = pb.getModulePassManager()
    pm.run(mod, pb)


def _optimised(module: Module, cpu: str, opt: int) -> tuple[llvm.TargetMachine, llvm.ModuleRef]:
    text = str(llvm_module(module))
    tm = target_machine(cpu, opt)
    mod = llvm.parse_assembly(text)
    mod.verify()
    mod.data_layout = str(tm.target_data)
    if opt > 0:
        optimise(mod, tm, opt)
    return tm, mod


def compile_object(module: Module, cpu: str = "native", opt: int = 3) -> tuple[bytes, str]:
    """The object code of a scheduled module, and the optimised LLVM IR text."""
    tm, mod = _optimised(module, cpu, opt)
    return tm.emit_object(mod), str(mod)


def compile_assembly(module: Module, cpu: str = "native", opt: int = 3) -> str:
    """The assembly text of a scheduled module (what compile_object encodes)."""
    tm, mod = _optimised(module, cpu, opt)
    return str(tm.emit_assembly(mod))
