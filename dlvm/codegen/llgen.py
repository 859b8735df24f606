"""LLGen: a module at stage schedule as one LLVM module (llvmlite, opaque pointers), optimised
and compiled to an object for the host CPU or a `--cpu` target; for a library, in parts compiled
side by side (dlvm.codegen.parallel)."""

from __future__ import annotations

import functools
import os

import llvmlite.binding as llvm
from llvmlite import ir

from dlvm.analysis.call_graph import CallGraph
from dlvm.codegen.errors import CodegenError
from dlvm.codegen.host import HostGen, Runtime, host_function
from dlvm.codegen.kernel import KernelGen
from dlvm.codegen.parallel import part_count, run_forked, split
from dlvm.codegen.spec import host_symbol
from dlvm.codegen.static_data import check_module
from dlvm.codegen.unrolling import disable_unrolling
from dlvm.ir.values import Function, Module

TRIPLE = "x86_64-unknown-linux-gnu"


def llvm_module(module: Module, compact: bool = False) -> ir.Module:
    """The LLVM IR of every function: kernels and host functions (`dl_<name>`); `compact`
    kernels trade some speed for less code (KernelGen.compact)."""
    return _generate(module, compact)[0]


def _generate(module: Module, compact: bool = False) -> tuple[ir.Module, list[list[ir.Function]]]:
    """The LLVM module, and its functions grouped as dlvm.codegen.parallel may split them: a
    kernel's entry with its body; a host function with the kernels it runs on its own thread
    (their entries, which LLVM inlines into it, calling their bodies); each other kernel
    alone."""
    if module.stage != "schedule":
        raise CodegenError(f"code generation needs stage schedule, found stage {module.stage}")
    m = ir.Module(name=module.name)
    m.triple = TRIPLE
    rt = Runtime.declare(m)
    kernels: dict[Function, KernelGen] = {}
    hosts: dict[Function, ir.Function] = {}
    for fn in module.functions:
        if not fn.blocks or fn.is_declaration:
            continue
        if fn.compute:
            kg = kernels[fn] = KernelGen(m, fn, "k." + host_symbol(fn.name)[3:], rt)
            kg.compact = compact
            kg.emit()
            # A body stays a function of its own: inlined into the host function that runs
            # it (a serial kernel's entry calls it directly), its loops were no longer
            # vectorised by LLVM (a softmax over rows of 16, [32 x 4 x 16 x 16]: 46 us alone,
            # 340 us inlined, its exp scalar; a 2-layer transformer encoder: 1.76 -> 1.10 ms).
            kg.body.attributes.add("noinline")
            if kg.core.opcode == "dot" or kg.permuted_copy:
                disable_unrolling(kg.body)
        else:
            hosts[fn] = host_function(m, fn)
    entries = {fn: kg.entry for fn, kg in kernels.items()}
    for fn in hosts:
        HostGen(m, fn, rt, entries, hosts).emit()
    check_module(m)
    units = {fn: [kg.entry, kg.body] for fn, kg in kernels.items()}
    callees = CallGraph(module).callees
    for fn, llfn in hosts.items():
        units[fn] = [llfn]
        for k in dict.fromkeys(callees[fn]):  # each once, in order
            if k in kernels and k in units and _serial(kernels[k]):  # not yet another's
                units[fn] += units.pop(k)
    return m, list(units.values())


def _serial(kg: KernelGen) -> bool:
    """Whether the kernel's entry calls its body itself, not through the thread pool."""
    return any(
        isinstance(i, ir.CallInstr) and i.callee is kg.body
        for block in kg.entry.blocks
        for i in block.instructions
    )


@functools.cache
def _initialise() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    # Loop strength reduction took half of code generation (0.4 s of the MLP in bench/cases.py)
    # and changed no kernel's speed measurably: x86 addressing modes already fold the address
    # arithmetic it would rewrite. LLVM's options are process-wide: this one holds for all code
    # generated through llvmlite in this process.
    llvm.set_option("dlvm", "-disable-lsr")


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
    """LLVM's -O2 or -O3 pipeline; at level 1 a clean-up of our own (CLEAN_UP)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization = level >= 2
    pto.slp_vectorization = level >= 2
    pb = llvm.create_pass_builder(tm, pto)
    if level == 1:
        pm = llvm.create_new_module_pass_manager()
        for name in CLEAN_UP:
            getattr(pm, f"add_{name}_pass")()
    else:
        pm = pb.getModulePassManager()
    pm.run(mod, pb)


# Level 1's passes. Our kernels are vectorised and register-blocked as they are generated, so
# what LLVM's -O1 adds to them is mostly clean-up: these passes gave the same kernel speed as
# its -O1 (44 against 45 us on NNKit's 32x784x128 layer, 560 against 780 us on 256 rows; -O2
# gives 37 and 300, vectorising the loops that pack b) in a quarter of the time (11-20 ms
# against 41), which is what a first compile (NNKit's JIT) waits for.
CLEAN_UP = ("always_inliner", "sroa", "instruction_combine", "simplify_cfg")


def compact(opt: int) -> bool:
    """Whether LLVM level `opt` compiles compact kernels: at 1 and below, where the build's
    time counts most (NNKit's first tier: a fifth less LLVM time, and a quarter less IR text,
    on a 32x784x128 layer, for the same kernel speed)."""
    return opt <= 1


def _optimised(module: Module, cpu: str, opt: int) -> tuple[llvm.TargetMachine, llvm.ModuleRef]:
    return _optimised_text(str(llvm_module(module, compact(opt))), cpu, opt)


def _optimised_text(text: str, cpu: str, opt: int) -> tuple[llvm.TargetMachine, llvm.ModuleRef]:
    tm = target_machine(cpu, opt)
    mod = llvm.parse_assembly(text)
    mod.verify()
    mod.data_layout = str(tm.target_data)
    if opt > 0:
        optimise(mod, tm, opt)
    return tm, mod


def _object(text: str, cpu: str, opt: int) -> bytes:
    tm, mod = _optimised_text(text, cpu, opt)
    return tm.emit_object(mod)


def object_files(
    module: Module, cpu: str = "native", opt: int = 3, jobs: int | None = None
) -> list[bytes]:
    """The object code of a scheduled module for a library, compiled in parts side by side
    (dlvm.codegen.parallel), `jobs` at a time (default: the CPUs this process may use): the
    functions of compile_object, except that LLVM does not inline across parts."""
    m, units = _generate(module, compact(opt))
    texts = split(m, units, part_count(units))
    work = [functools.partial(_object, text, cpu, opt) for text in texts]
    return run_forked(work, jobs if jobs is not None else _cpus())


def _cpus() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def compile_object(module: Module, cpu: str = "native", opt: int = 3) -> tuple[bytes, str]:
    """The object code of a scheduled module, and the optimised LLVM IR text."""
    tm, mod = _optimised(module, cpu, opt)
    return tm.emit_object(mod), str(mod)


def compile_assembly(module: Module, cpu: str = "native", opt: int = 3) -> str:
    """The assembly text of a scheduled module (what compile_object encodes)."""
    tm, mod = _optimised(module, cpu, opt)
    return str(tm.emit_assembly(mod))
