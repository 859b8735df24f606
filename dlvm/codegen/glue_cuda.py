"""The CUDA half of a library's C glue (dlvm.codegen.glue), for a library built for CUDA: each
entry's device plan (dlvm.codegen.device_plan), and the tables that give the runtime the
kernels and the plans (dlrt.h: dlrt_model_cuda, dlrt_plan). The runtime runs them for a model
created on "cuda:N" (runtime/src/model_cuda.c)."""

from __future__ import annotations

from dataclasses import dataclass

from dlvm.codegen.cuda import Launch
from dlvm.codegen.device_plan import DevicePlan, NotPlannable, device_plan
from dlvm.codegen.glue_text import Pool, c_string, element, wrap_call
from dlvm.codegen.spec import LibrarySpec
from dlvm.ir.values import Function, Module


@dataclass(frozen=True)
class CudaGlue:
    """What the glue needs of a library's CUDA kernels: the GPU architecture, the launch of
    each kernel (in PTX order), and per entry name its device plan or why it has none."""

    gpu: str
    kernels: tuple[Launch, ...]
    plans: dict[str, DevicePlan | str]

    @property
    def scratch(self) -> int:
        return max([1, *(p.scratch for p in self.plans.values() if isinstance(p, DevicePlan))])


def cuda_glue(module: Module, spec: LibrarySpec, launches: list[Launch], gpu: str) -> CudaGlue:
    """The plans of spec's entries over a module scheduled for CUDA."""
    kernels: dict[Function, int] = {}
    for fn in module.functions:
        if fn.compute and fn.blocks:
            kernels[fn] = len(kernels)
    plans: dict[str, DevicePlan | str] = {}
    for e in spec.every_entry():
        host = module.function_named(e.host)
        assert host is not None, e.host
        n_in, n_out, n_state = len(e.inputs), len(e.outputs), len(e.params) + len(e.states)
        results = range(n_out, n_out + n_state) if e.kind == "train" else range(0)
        try:
            plans[e.name] = device_plan(host, kernels, range(n_in, n_in + n_state), results)
        except NotPlannable as why:
            plans[e.name] = str(why)
    return CudaGlue(gpu, tuple(launches), plans)


@dataclass(frozen=True)
class CudaTables:
    """The CUDA tables of a library's glue: their C text, the C expression of each entry's plan
    (NULL for an entry that runs on the CPU), and that of the dlrt_model_cuda."""

    lines: list[str]
    plans: dict[str, str]
    model: str


def tables(cuda: CudaGlue, spec: LibrarySpec, indices: Pool) -> CudaTables:
    """The PTX's symbol, the kernel table and every plan as rows of dlrt_launch, dlrt_slot and
    dlrt_plan tables; the plans' lists of slots go into `indices`."""
    out = [
        "/* The kernels' PTX (a NUL-terminated string in the library's data), their launches, and",
        "   each entry's plan: its launches (kernel, slots) over slots of device memory. */",
        '__attribute__((visibility("hidden"))) extern const char dl_cuda_ptx[];',
    ]
    kernels = "NULL"
    if cuda.kernels:
        kernels = "kernels"
        out.append("static const dlrt_kernel kernels[] = {")
        for k in cuda.kernels:
            grid, block = ", ".join(map(str, k.grid)), ", ".join(map(str, k.block))
            out.append(f'    {{"{k.symbol}", {{{grid}}}, {{{block}}}, {k.pointers}}},')
        out.append("};")
    launches: list[str] = []
    slots: list[str] = []
    rows: list[str] = []
    plans: dict[str, str] = {}
    for e in spec.every_entry():
        plan = cuda.plans[e.name]
        if not isinstance(plan, DevicePlan):
            plans[e.name] = "NULL"
            continue
        steps = element("launches", len(launches)) if plan.steps else "NULL"
        launches += [f"{{{k}, {indices.at(used)}}}" for k, used in plan.steps]
        where = element("slots", len(slots)) if plan.slots else "NULL"
        slots += [f"{{{_or_none(s.argument)}, {_or_none(s.result)}, {s.offset}}}"
                  for s in plan.slots]  # fmt: skip
        fields = [steps, str(len(plan.steps)), str(len(plan.slots)), where]
        fields += [indices.at(plan.uploads), indices.at(plan.results)]
        plans[e.name] = element("plans", len(rows))
        rows.append("    {" + ", ".join(fields) + "},")
    if launches:
        out += wrap_call("static const dlrt_launch launches[] = {", launches, "};")
    if slots:
        out += wrap_call("static const dlrt_slot slots[] = {", slots, "};")
    if rows:
        out += ["static const dlrt_plan plans[] = {", *rows, "};"]
    fields = [c_string(cuda.gpu), "dl_cuda_ptx", kernels, str(len(cuda.kernels)), str(cuda.scratch)]
    out += wrap_call("static const dlrt_model_cuda cuda = {", fields, "};")
    return CudaTables(out, plans, "&cuda")


def _or_none(value: int | None) -> str:
    return "-1" if value is None else str(value)
