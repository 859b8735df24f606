/* bf16_rounding.c: __truncsfbf2, float to bfloat rounded to nearest even (NaN kept quiet), the
 * helper LLVM calls for an `fptrunc float to bfloat` on an x86-64 CPU without AVX-512 BF16
 * (vcvtneps2bf16). Compiler-rt has it, but a library is linked by the system C compiler, whose
 * libgcc (before GCC 13) lacks it: without this definition, a library with bf16 code built for
 * such a CPU (`--cpu skylake-avx512`, `x86-64-v3`) would not load. Hidden: each library has
 * its own. Its result is a bf16 in the low 16 bits of xmm0, the calling convention LLVM uses
 * for it, so it is written in assembly (GCC 12's C has no bf16 value to return). It rounds as
 * ml_dtypes does: subnormal results stay subnormal. */

#if defined(__x86_64__) && defined(__ELF__)
__asm__(".text\n"
        ".globl __truncsfbf2\n"
        ".hidden __truncsfbf2\n"
        ".type __truncsfbf2, @function\n"
        "__truncsfbf2:\n"
        "    movd %xmm0, %eax\n"
        "    movl %eax, %ecx\n"
        "    andl $0x7fffffff, %ecx\n"
        "    cmpl $0x7f800000, %ecx\n"
        "    ja 1f\n"                /* NaN: its high half, made quiet */
        "    movl %eax, %ecx\n"
        "    shrl $16, %ecx\n"
        "    andl $1, %ecx\n"
        "    leal 0x7fff(%eax,%ecx), %eax\n" /* + 0x7fff + the kept half's last bit: to even */
        "    shrl $16, %eax\n"
        "    movd %eax, %xmm0\n"
        "    ret\n"
        "1:\n"
        "    shrl $16, %eax\n"
        "    orl $0x40, %eax\n"
        "    movd %eax, %xmm0\n"
        "    ret\n"
        ".size __truncsfbf2, .-__truncsfbf2\n");
#endif
