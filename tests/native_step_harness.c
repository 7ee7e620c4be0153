/* One C decode step from a file: the test's way to run decode_step.c where Python cannot (a cross-compiled build
 * under an emulator, e.g. ARM64's NEON kernels through qemu-aarch64 on an x86-64 machine).
 *
 *   cc -O2 -fopenmp -I workbench/rollout/backends -o harness tests/native_step_harness.c -lm
 *   ./harness STEP_FILE LOGITS_FILE
 *
 * STEP_FILE (written by tests/test_native_decode.py's dump_step, little-endian): "WBSTEP1\0"; int64 layers, hidden,
 * inter, heads, kv_heads, head_dim, vocab, embed_rows, rows, cap, n; float32 eps, rope_scale, attn_scale, pad; then
 * arrays, each an int64 byte count and the bytes: inv_freq, embed, final_norm; the head (int64 n, k, kind, then its
 * array); per layer norm1, norm2, the matrices qkv, o, gate_up, down (each as the head) and 7 LoRA terms (int64 r,
 * float32 scale, pad, then arrays a and b; r = 0: none); per layer its key and value buffers; the mask, tokens and
 * positions. LOGITS_FILE gets rows x vocab float32. Exit status: 0, or 1 with a line on stderr. */
#include "decode_step.c"

#include <stdio.h>

static FILE *in_file;

static __attribute__((noreturn)) void fail(const char *what) {
    fprintf(stderr, "harness: %s\n", what);
    exit(1);
}

static inline void need(int ok, const char *what) {
    if (!ok) fail(what);
}

static int64_t read_i64(void) {
    int64_t v;
    need(fread(&v, 8, 1, in_file) == 1, "short file (an int64)");
    return v;
}

static float read_f32(void) {
    float v;
    need(fread(&v, 4, 1, in_file) == 1, "short file (a float32)");
    return v;
}

static void *read_array(int64_t *nbytes) {
    const int64_t n = read_i64();
    need(n >= 0 && n < ((int64_t)1 << 34), "an array size out of range");
    void *p = malloc(n > 0 ? (size_t)n : 1);
    need(p != NULL, "out of memory");
    need(n == 0 || fread(p, 1, (size_t)n, in_file) == (size_t)n, "short file (an array)");
    if (nbytes) *nbytes = n;
    return p;
}

static wb_mat read_mat(void) {
    wb_mat m;
    m.n = read_i64();
    m.k = read_i64();
    m.kind = (int32_t)read_i64();
    m.pad_ = 0;
    m.data = read_array(NULL);
    return m;
}

int main(int argc, char **argv) {
    need(argc == 3, "usage: harness STEP_FILE LOGITS_FILE");
    in_file = fopen(argv[1], "rb");
    need(in_file != NULL, "cannot open the step file");
    char magic[8];
    need(fread(magic, 1, 8, in_file) == 8 && memcmp(magic, "WBSTEP1", 8) == 0, "not a step file (magic)");
    wb_model m;
    memset(&m, 0, sizeof m);
    m.layers = read_i64(), m.hidden = read_i64(), m.inter = read_i64(), m.heads = read_i64();
    m.kv_heads = read_i64(), m.head_dim = read_i64(), m.vocab = read_i64();
    const int64_t embed_rows = read_i64(), rows = read_i64(), cap = read_i64(), n = read_i64();
    (void)embed_rows;
    m.eps = read_f32(), m.rope_scale = read_f32(), m.attn_scale = read_f32();
    (void)read_f32();
    need(m.layers > 0 && m.layers < 4096 && rows >= 1 && rows <= MAXROWS && n >= 0 && n < cap, "sizes out of range");
    const size_t NL = (size_t)m.layers & 4095; /* checked above; the mask shows the compiler the bound */
    m.inv_freq = read_array(NULL);
    m.embed = read_array(NULL);
    m.final_norm = read_array(NULL);
    m.head = read_mat();
    wb_layer *layers = calloc(NL, sizeof(wb_layer));
    need(layers != NULL, "out of memory");
    for (int64_t l = 0; l < m.layers; l++) {
        wb_layer *L = &layers[l];
        L->norm1 = read_array(NULL);
        L->norm2 = read_array(NULL);
        L->qkv = read_mat(), L->o = read_mat(), L->gate_up = read_mat(), L->down = read_mat();
        for (int j = 0; j < NPROJ; j++) {
            L->lora[j].r = (int32_t)read_i64();
            L->lora[j].scale = read_f32();
            (void)read_f32();
            float *a = read_array(NULL), *b = read_array(NULL);
            L->lora[j].a = L->lora[j].r > 0 ? a : NULL;
            L->lora[j].b = L->lora[j].r > 0 ? b : NULL;
        }
    }
    m.layer = layers;
    float **kc = calloc(NL, sizeof(float *)), **vc = calloc(NL, sizeof(float *));
    need(kc != NULL && vc != NULL, "out of memory");
    for (int64_t l = 0; l < m.layers; l++) {
        kc[l] = read_array(NULL);
        vc[l] = read_array(NULL);
    }
    int64_t mask_bytes, tok_bytes;
    const int64_t *mask = read_array(&mask_bytes), *tokens = read_array(&tok_bytes), *pos = read_array(NULL);
    need(mask_bytes == rows * (n + 1) * 8 && tok_bytes == rows * 8, "mask or tokens of the wrong size");
    fclose(in_file);
    float *logits = malloc(sizeof(float) * (size_t)(rows * m.vocab));
    need(logits != NULL, "out of memory");
    const int rc = wb_step(&m, kc, vc, rows, cap, n, mask, tokens, pos, logits, 1);
    need(rc == 0, "wb_step failed");
    FILE *out = fopen(argv[2], "wb");
    need(out != NULL && fwrite(logits, sizeof(float), (size_t)(rows * m.vocab), out) == (size_t)(rows * m.vocab),
         "cannot write the logits");
    fclose(out);
    printf("simd %d rows %lld\n", wb_simd(), (long long)rows);
    return 0;
}
