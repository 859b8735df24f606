/* The CUDA execution model on the CPU, for testing generated kernels where no GPU is: each
 * block of a launch runs as one POSIX thread per CUDA thread (blocks one after another), the
 * special registers are thread-local variables and `bar.sync 0` is a pthread barrier. The
 * kernels' LLVM IR is compiled for the host with its NVVM intrinsics renamed to the functions
 * below (tests/unit/cuda_emulator.py). */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    unsigned x, y, z;
} dim3;

static __thread dim3 tid, ctaid;
static __thread unsigned linear; /* the thread's index in its block */
static dim3 ntid, nctaid;
static pthread_barrier_t barrier;
/* Warp shuffles: each warp's threads meet at their own barrier around an exchange. */
static pthread_barrier_t warp_barrier[32];
static float exchange_f32[1024];
static unsigned exchange_i32[1024];
static unsigned block_threads;

unsigned dlemu_tid_x(void) { return tid.x; }
unsigned dlemu_tid_y(void) { return tid.y; }
unsigned dlemu_tid_z(void) { return tid.z; }
unsigned dlemu_ctaid_x(void) { return ctaid.x; }
unsigned dlemu_ctaid_y(void) { return ctaid.y; }
unsigned dlemu_ctaid_z(void) { return ctaid.z; }
unsigned dlemu_ntid_x(void) { return ntid.x; }
unsigned dlemu_ntid_y(void) { return ntid.y; }
unsigned dlemu_ntid_z(void) { return ntid.z; }
unsigned dlemu_nctaid_x(void) { return nctaid.x; }
unsigned dlemu_nctaid_y(void) { return nctaid.y; }
unsigned dlemu_nctaid_z(void) { return nctaid.z; }
void dlemu_barrier0(void) { pthread_barrier_wait(&barrier); }

/* shfl.sync.down with a full mask and clamp 31: lane + delta's value, or the lane's own past
   the warp's end. Every thread of the warp must call it, as on the GPU. */
#define SHUFFLE(type, name, exchange)                                                           \
    type name(unsigned mask, type v, unsigned delta, unsigned clamp) {                          \
        unsigned warp = linear / 32, lane = linear % 32;                                        \
        (void)mask, (void)clamp;                                                                \
        exchange[linear] = v;                                                                   \
        pthread_barrier_wait(&warp_barrier[warp]);                                              \
        type r = lane + delta < 32 && linear + delta < block_threads ? exchange[linear + delta] \
                                                                     : v;                       \
        pthread_barrier_wait(&warp_barrier[warp]);                                              \
        return r;                                                                               \
    }
SHUFFLE(float, dlemu_shfl_down_f32, exchange_f32)
SHUFFLE(unsigned, dlemu_shfl_down_i32, exchange_i32)

/* mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 over the warp, with the fragment layout of
 * the PTX ISA: each lane passes its A fragments a[0..3] and B fragments b[0..1] (two f16 each,
 * the lower-numbered element in the low half) and gets its four elements of D = A·B + C. */
static unsigned exchange_a[1024][4], exchange_b[1024][2];

static float half_of(unsigned reg, int high) {
    unsigned short bits = (unsigned short)(high ? reg >> 16 : reg & 0xFFFF);
    _Float16 h;
    memcpy(&h, &bits, sizeof h);
    return (float)h;
}

/* Publishes this lane's fragments to its warp and waits for every lane's; returns the index of
 * the warp's lane 0 among the block's threads. */
static unsigned exchange_fragments(unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                   unsigned b0, unsigned b1) {
    exchange_a[linear][0] = a0, exchange_a[linear][1] = a1;
    exchange_a[linear][2] = a2, exchange_a[linear][3] = a3;
    exchange_b[linear][0] = b0, exchange_b[linear][1] = b1;
    pthread_barrier_wait(&warp_barrier[linear / 32]);
    return linear / 32 * 32;
}

/* D = A·B + C for this lane's four elements of the 16 × 8 D (row g, plus 8 for e ≥ 2; column
 * 2t + e mod 2), `depth` deep; a(base, row, k) and b(base, k, col) read the warp's fragments. */
typedef float (*operand)(unsigned base, unsigned i, unsigned j);

static void accumulate(float *acc, unsigned base, unsigned depth, operand a, operand b) {
    unsigned lane = linear % 32, group = lane / 4, tig = lane % 4;
    for (int e = 0; e < 4; ++e) {
        unsigned row = group + (e >= 2 ? 8 : 0), col = tig * 2 + (e & 1);
        float sum = 0;
        for (unsigned k = 0; k < depth; ++k)
            sum += a(base, row, k) * b(base, k, col);
        acc[e] += sum;
    }
    pthread_barrier_wait(&warp_barrier[linear / 32]); /* before the exchange is reused */
}

/* f16 m16n8k16: A[row][k] is element (k % 2) + 2·(row ≥ 8) + 4·(k ≥ 8) of lane
 * (row % 8)·4 + (k % 8) / 2; B[k][col] element (k % 2) + 2·(k ≥ 8) of lane col·4 + (k % 8) / 2. */
static float f16_a(unsigned base, unsigned row, unsigned k) {
    unsigned i = (k & 1) + (row >= 8 ? 2 : 0) + (k >= 8 ? 4 : 0);
    return half_of(exchange_a[base + (row & 7) * 4 + (k & 7) / 2][i / 2], i & 1);
}

static float f16_b(unsigned base, unsigned k, unsigned col) {
    unsigned i = (k & 1) + (k >= 8 ? 2 : 0);
    return half_of(exchange_b[base + col * 4 + (k & 7) / 2][i / 2], i & 1);
}

void dlemu_mma_m16n8k16(float *acc, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                        unsigned b0, unsigned b1) {
    accumulate(acc, exchange_fragments(a0, a1, a2, a3, b0, b1), 16, f16_a, f16_b);
}

/* bf16 m16n8k16 (mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32): f16's fragment layout,
 * a bf16 in each half of a register (the upper 16 bits of an f32). */
static float bf16_of(unsigned reg, int high) {
    unsigned bits = (high ? reg >> 16 : reg & 0xFFFF) << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static float bf16_a(unsigned base, unsigned row, unsigned k) {
    unsigned i = (k & 1) + (row >= 8 ? 2 : 0) + (k >= 8 ? 4 : 0);
    return bf16_of(exchange_a[base + (row & 7) * 4 + (k & 7) / 2][i / 2], i & 1);
}

static float bf16_b(unsigned base, unsigned k, unsigned col) {
    unsigned i = (k & 1) + (k >= 8 ? 2 : 0);
    return bf16_of(exchange_b[base + col * 4 + (k & 7) / 2][i / 2], i & 1);
}

void dlemu_mma_bf16(float *acc, unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                    unsigned b1) {
    accumulate(acc, exchange_fragments(a0, a1, a2, a3, b0, b1), 16, bf16_a, bf16_b);
}

/* cvt.rna.tf32.f32: x with 10 bits of mantissa, rounded to nearest, ties away from zero. */
unsigned dlemu_f2tf32_rna(float x) {
    unsigned u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7F800000u) != 0x7F800000u) /* not inf or NaN */
        u += 0x1000u;
    return u & 0xFFFFE000u;
}

static float tf32_of(unsigned bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* tf32 m16n8k8: A[row][k] is element (row ≥ 8) + 2·(k ≥ 4) of lane (row % 8)·4 + k % 4;
 * B[k][col] element (k ≥ 4) of lane col·4 + k % 4. */
static float tf32_a(unsigned base, unsigned row, unsigned k) {
    return tf32_of(exchange_a[base + (row & 7) * 4 + (k & 3)][(row >= 8) + 2 * (k >= 4)]);
}

static float tf32_b(unsigned base, unsigned k, unsigned col) {
    return tf32_of(exchange_b[base + col * 4 + (k & 3)][k >= 4]);
}

void dlemu_mma_tf32(float *acc, unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                    unsigned b0, unsigned b1) {
    accumulate(acc, exchange_fragments(a0, a1, a2, a3, b0, b1), 8, tf32_a, tf32_b);
}

enum { MAX_POINTERS = 16 };

typedef struct {
    void *kernel;
    int count;
    void **pointers;
    dim3 tid, ctaid;
} thread_args;

/* Every kernel takes only pointers: it is called with MAX_POINTERS of them, the ones it does
 * not take being ignored (the x86-64 calling convention: the caller pops its arguments). */
typedef void (*kernel_fn)(void *, void *, void *, void *, void *, void *, void *, void *,
                          void *, void *, void *, void *, void *, void *, void *, void *);

static void *run_thread(void *arg) {
    thread_args *a = arg;
    void **p = a->pointers;
    tid = a->tid;
    ctaid = a->ctaid;
    linear = (tid.z * ntid.y + tid.y) * ntid.x + tid.x;
    void *q[MAX_POINTERS] = {0};
    memcpy(q, p, sizeof(void *) * (size_t)a->count);
    ((kernel_fn)a->kernel)(q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7], q[8], q[9], q[10],
                           q[11], q[12], q[13], q[14], q[15]);
    return NULL;
}

/* Runs kernel(pointers[0], …) on a grid of blocks; 0 on success, -1 if a thread could not
 * be started or the kernel takes too many pointers. */
int dlemu_launch(void *kernel, const unsigned grid[3], const unsigned block[3], int count,
                 void **pointers) {
    if (count < 1 || count > MAX_POINTERS) return -1;
    unsigned threads = block[0] * block[1] * block[2];
    pthread_t handles[1024];
    thread_args args[1024];
    if (threads == 0 || threads > 1024) return -1;
    ntid = (dim3){block[0], block[1], block[2]};
    nctaid = (dim3){grid[0], grid[1], grid[2]};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 1 << 18);
    for (unsigned bz = 0; bz < grid[2]; bz++)
        for (unsigned by = 0; by < grid[1]; by++)
            for (unsigned bx = 0; bx < grid[0]; bx++) {
                pthread_barrier_init(&barrier, NULL, threads);
                block_threads = threads;
                for (unsigned w = 0; w * 32 < threads; w++)
                    pthread_barrier_init(&warp_barrier[w], NULL,
                                         threads - w * 32 < 32 ? threads - w * 32 : 32);
                unsigned n = 0;
                for (unsigned z = 0; z < block[2]; z++)
                    for (unsigned y = 0; y < block[1]; y++)
                        for (unsigned x = 0; x < block[0]; x++, n++) {
                            args[n] = (thread_args){kernel, count, pointers,
                                                    {x, y, z}, {bx, by, bz}};
                            if (pthread_create(&handles[n], &attr, run_thread, &args[n]))
                                return -1; /* the started threads wait at the barrier */
                        }
                for (unsigned i = 0; i < n; i++) pthread_join(handles[i], NULL);
                pthread_barrier_destroy(&barrier);
                for (unsigned w = 0; w * 32 < threads; w++)
                    pthread_barrier_destroy(&warp_barrier[w]);
            }
    pthread_attr_destroy(&attr);
    return 0;
}
