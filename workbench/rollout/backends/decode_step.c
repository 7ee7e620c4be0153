/* One decode step of a Llama-architecture model for 1 to 8 rows, in one call: the int4 engine's small-batch step
 * without a torch operator per norm, rotary embedding, attention or residual, each weight unpacked once for all rows
 * (see native.py, which builds and loads this file and packs the weights).
 *
 * Weights are read row by row:
 *   - int4 in pairs of blocks of 32 inputs, 48 bytes a pair: 32 bytes of 4-bit levels q, the two blocks' fp32 scales s,
 *     their fp32 offsets zz. w = (q - 8) * scale + zero is the int4 engine's grid (scale and zero rounded to bf16 as it
 *     rounds them); s = scale and zz = zero - 136 * scale, because the products run on 128 + q (see dot_int4). A
 *     block's 16 level bytes hold q[j] in the low nibble of byte j and q[j + 16] in the high one, and a pair's 32 bytes
 *     interleave its two blocks two bytes at a time (A0 A1 B0 B1 A2 A3 B2 B3 ...), so that in a bf16 dot product of
 *     the widened bytes each fp32 lane sums one block: even lanes the first, odd lanes the second;
 *   - int8 blocks of 32 inputs, 36 bytes: 32 signed levels, then an fp32 scale d: w = q * d (GGUF's Q8_0 rule).
 * Activations entering a product are rounded to bf16 first, as the int4 engine's torch kernel does; products of bf16
 * values are exact in fp32 and sums are fp32 (the AVX2 kernels instead round each block of 32 inputs to 16-bit
 * integers under one scale, finer than bf16 for all but the block's smallest inputs, see quantize_q16). LoRA terms
 * (fp32 A and B, as peft holds them) are added on the unrounded input. The key/value cache is the backend's own fp32
 * buffer: this step writes each row's new keys and values at position n and attends to positions 0..n that its mask
 * keeps. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if !defined(WB_PORTABLE) && (defined(__AVX512F__) || defined(__AVX2__))
#include <immintrin.h>
#endif
/* The vector kernels: int4 products as AVX512-BF16 dot products where the CPU has them; else (any x86-64 since 2013
 * with AVX2 and FMA: AMD Zen, Intel client parts, AVX-512 without bf16) the levels widened to 16-bit integers and
 * multiplied by 16-bit inputs with vpmaddwd, exact integer sums (WB_EXACT keeps the earlier AVX2 kernel: levels
 * widened to fp32 and multiplied by the bf16-rounded inputs with FMA, for comparisons); on ARM64 (every ARMv8-A core:
 * Apple Silicon, Graviton, Ampere) the levels widened to fp32 and NEON's fused multiply-adds, four lanes at a time;
 * else the plain C loops (WB_PORTABLE asks for those on any CPU: the reference the vector kernels are tested
 * against). */
#if !defined(WB_PORTABLE)
#if defined(__AVX512F__) && defined(__AVX512BF16__)
#define WB_INT4_512 1
#endif
#if defined(__AVX2__) && defined(__FMA__)
#define WB_AVX2 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON) && !defined(WB_AVX2) && !defined(__AVX512F__)
#define WB_NEON 1
#include <arm_neon.h>
#endif
#endif
#if defined(WB_AVX2) && !defined(WB_INT4_512)
#define WB_INT4_AVX2 1 /* AVX2 int4 products: dot_int4_rows_q16, or with WB_EXACT dot_int4_rows_avx2 */
#endif
#if defined(WB_INT4_AVX2) && !defined(WB_EXACT)
#define WB_INT4_Q16 1 /* int4 products as integer dot products with 16-bit inputs (quantize_q16, dot_int4_rows_q16) */
#endif
#if (defined(WB_INT4_AVX2) && !defined(WB_INT4_Q16)) || defined(WB_NEON)
#define WB_INT4_F32 1 /* the int4 levels widened to fp32: prepare() fills xf and xl */
#endif

enum { BLOCK = 32, INT4 = 0, INT8 = 1, NPROJ = 7, MAXROWS = 8, MAXGROUP = 8 };
/* Bytes ahead of the row being read that each product asks the cache for: one core's hardware prefetcher alone keeps
 * too few lines in flight (int4 products streamed at 15 GB/s without, 19 GB/s with, near their in-cache speed). */
#define AHEAD 4096

typedef struct {
    const uint8_t *data; /* rows x (k / 32) blocks */
    int64_t n, k;        /* outputs, inputs */
    int32_t kind;        /* INT4 or INT8 */
    int32_t pad_;
} wb_mat;

typedef struct {
    const float *a; /* r x k (NULL: no LoRA term) */
    const float *b; /* n x r */
    float scale;
    int32_t r;
} wb_lora;

typedef struct {
    const float *norm1, *norm2;
    wb_mat qkv, o, gate_up, down; /* q|k|v and gate|up stacked by output */
    wb_lora lora[NPROJ];          /* q, k, v, o, gate, up, down */
} wb_layer;

typedef struct {
    int64_t layers, hidden, inter, heads, kv_heads, head_dim, vocab;
    float eps, rope_scale, attn_scale, pad_;
    const float *inv_freq; /* head_dim / 2 */
    const float *embed;    /* vocab x hidden */
    const float *final_norm;
    wb_mat head;
    const wb_layer *layer;
} wb_model;

int wb_simd(void) { /* 512: the AVX-512 kernels (int4 needs AVX512-BF16 too); 256: AVX2 + FMA; 128: NEON; 0: the portable loops */
#if defined(WB_INT4_512)
    return 512;
#elif defined(WB_AVX2)
    return 256;
#elif defined(WB_NEON)
    return 128;
#else
    return 0;
#endif
}

static inline float bf16_round(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even; NaN/inf kept */
    u &= 0xffff0000u;
    memcpy(&x, &u, 4);
    return x;
}

/* An activation vector ready for the products: rounded to bf16 (xr, fp32 values), as bf16 bits in the interleaved
 * order of the int4 pairs (xb: per pair, the 32 inputs met by the low nibbles, then the 32 met by the high ones), and
 * per int4 pair each block's sum over 8 (xs8: added once per lane of its parity, 8 lanes). The inputs met by the high
 * nibbles are stored times 64 (exact), see dot_int4. */
typedef struct {
    float *xr, *xs8;
    uint16_t *xb;
    float *xf, *xl; /* WB_INT4_F32: xb's order as unscaled fp32 (64 a pair), and per pair the 8 lane sums of its 8
                     * vectors; WB_INT4_Q16: the 16-bit levels and per pair 4 floats (quantize_q16) */
} wb_input;

#if defined(WB_INT4_Q16)
/* The inputs of the int4 products as dot_int4_rows_q16 reads them: per block of 32 a scale d = max |x| / 32767 and
 * the levels round(x / d) as 16-bit integers in xb's order (int16 at xf, 64 a pair: the inputs met by the low nibbles,
 * then those met by the high ones), and per pair in xl each block's d and its exact input sum / 4 (4 floats). The
 * levels are within d / 2 = max |x| / 65534 of the unrounded input: finer than bf16's rounding (|x| / 512) for every
 * input above 1/128 of its block's largest. */
static void quantize_q16(const float *x, int64_t k, const wb_input *in) {
    for (int64_t p = 0; p < k / (2 * BLOCK); p++) {
        const float *a = x + 2 * p * BLOCK, *b = a + BLOCK;
        float ma = 0.f, mb = 0.f, ta = 0.f, tb = 0.f;
        for (int j = 0; j < BLOCK; j++) {
            ma = fmaxf(ma, fabsf(a[j])), mb = fmaxf(mb, fabsf(b[j]));
            ta += a[j], tb += b[j];
        }
        const float ua = ma > 0.f ? 32767.f / ma : 0.f, ub = mb > 0.f ? 32767.f / mb : 0.f;
        int16_t *q = (int16_t *)in->xf + p * 64;
        for (int half = 0; half < 2; half++)     /* as prepare's xb: words 4k, 4k+1 block a; 4k+2, 4k+3 block b */
            for (int k4 = 0; k4 < 8; k4++)
                for (int e = 0; e < 2; e++) {
                    q[half * 32 + 4 * k4 + e] = (int16_t)lrintf(a[half * 16 + 2 * k4 + e] * ua);
                    q[half * 32 + 4 * k4 + 2 + e] = (int16_t)lrintf(b[half * 16 + 2 * k4 + e] * ub);
                }
        float *d = in->xl + p * 4;
        d[0] = ma / 32767.f, d[1] = mb / 32767.f, d[2] = ta / 4.f, d[3] = tb / 4.f;
    }
}
#endif

static void prepare(const float *x, int64_t k, const wb_input *in) {
    for (int64_t i = 0; i < k; i++) in->xr[i] = bf16_round(x[i]);
#if defined(WB_INT4_Q16)
    quantize_q16(x, k, in); /* the int8 head reads xr; nothing reads xb and xs8 */
#else
    for (int64_t p = 0; p < k / (2 * BLOCK); p++) {
        const float *a = in->xr + 2 * p * BLOCK, *b = a + BLOCK;
        uint16_t *o = in->xb + 2 * p * BLOCK;
        float sa = 0.f, sb = 0.f;
        for (int j = 0; j < BLOCK; j++) sa += a[j], sb += b[j];
        in->xs8[2 * p] = sa / 8.f, in->xs8[2 * p + 1] = sb / 8.f;
        for (int half = 0; half < 2; half++)     /* low nibbles meet inputs 0..15, high nibbles 16..31 */
            for (int k4 = 0; k4 < 8; k4++)       /* words 4k, 4k+1: block a; 4k+2, 4k+3: block b */
                for (int e = 0; e < 2; e++) {
                    uint32_t ua, ub;
                    const float fa = a[half * 16 + 2 * k4 + e] * (half ? 64.f : 1.f);  /* exact: a power of 2 */
                    const float fb = b[half * 16 + 2 * k4 + e] * (half ? 64.f : 1.f);
                    memcpy(&ua, &fa, 4);
                    memcpy(&ub, &fb, 4);
                    o[half * 32 + 4 * k4 + e] = (uint16_t)(ua >> 16);
                    o[half * 32 + 4 * k4 + 2 + e] = (uint16_t)(ub >> 16);
#if defined(WB_INT4_F32)
                    in->xf[p * 64 + half * 32 + 4 * k4 + e] = a[half * 16 + 2 * k4 + e];
                    in->xf[p * 64 + half * 32 + 4 * k4 + 2 + e] = b[half * 16 + 2 * k4 + e];
#endif
                }
#if defined(WB_INT4_F32)
        for (int j = 0; j < 8; j++) { /* lane j of the pair's 8 vectors of 8: block a for j = 0, 1, 4, 5 */
            float t = 0.f;
            for (int v = 0; v < 8; v++) t += in->xf[p * 64 + v * 8 + j];
            in->xl[p * 8 + j] = t;
        }
#endif
    }
#endif
}

#if defined(WB_AVX2)
static inline float hsum256(__m256 v) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    return _mm_cvtss_f32(_mm_add_ss(x, _mm_movehdup_ps(x)));
}

#endif

#if defined(WB_INT4_AVX2)
/* One weight row of an int4 product against M inputs with AVX2: the pair's 64 levels widened once to 8 fp32 vectors
 * (q, not 128 + q: exact in fp32, as are their products with bf16-rounded inputs), then per input 8 multiply-adds
 * against xf and, per block, scale * sum(q x) + (zero - 8 scale) * sum(x) as two multiply-adds over the lanes (lanes
 * 0, 1, 4, 5 hold block a, 2, 3, 6, 7 block b; xl holds each lane's input sum). */
static inline __attribute__((always_inline)) void dot_int4_rows_avx2(const uint8_t *blk, const wb_input *in,
                                                                      const int M, int64_t pairs, float *y,
                                                                      int64_t ystride) {
    const __m256i low = _mm256_set1_epi32(0x0f);
    __m256 acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *b = blk + p * 48;
        _mm_prefetch((const char *)(b + AHEAD), _MM_HINT_T0);
        const __m128i r0 = _mm_loadu_si128((const __m128i *)b), r1 = _mm_loadu_si128((const __m128i *)(b + 16));
        const __m256i w0 = _mm256_cvtepu8_epi32(r0), w1 = _mm256_cvtepu8_epi32(_mm_srli_si128(r0, 8));
        const __m256i w2 = _mm256_cvtepu8_epi32(r1), w3 = _mm256_cvtepu8_epi32(_mm_srli_si128(r1, 8));
        const __m256 l0 = _mm256_cvtepi32_ps(_mm256_and_si256(w0, low)), l1 = _mm256_cvtepi32_ps(_mm256_and_si256(w1, low));
        const __m256 l2 = _mm256_cvtepi32_ps(_mm256_and_si256(w2, low)), l3 = _mm256_cvtepi32_ps(_mm256_and_si256(w3, low));
        const __m256 h0 = _mm256_cvtepi32_ps(_mm256_srli_epi32(w0, 4)), h1 = _mm256_cvtepi32_ps(_mm256_srli_epi32(w1, 4));
        const __m256 h2 = _mm256_cvtepi32_ps(_mm256_srli_epi32(w2, 4)), h3 = _mm256_cvtepi32_ps(_mm256_srli_epi32(w3, 4));
        float s[2], zz[2];
        memcpy(s, b + 32, 8);
        memcpy(zz, b + 40, 8);
        const float ca = zz[0] + 128.f * s[0], cb = zz[1] + 128.f * s[1]; /* zero - 8 * scale, see pack_int4 */
        const __m256 sv = _mm256_setr_ps(s[0], s[0], s[1], s[1], s[0], s[0], s[1], s[1]);
        const __m256 cv = _mm256_setr_ps(ca, ca, cb, cb, ca, ca, cb, cb);
        for (int r = 0; r < M; r++) {
            const float *x = in[r].xf + p * 64;
            __m256 t = _mm256_mul_ps(l0, _mm256_loadu_ps(x));
            __m256 u = _mm256_mul_ps(h0, _mm256_loadu_ps(x + 32));
            t = _mm256_fmadd_ps(l1, _mm256_loadu_ps(x + 8), t);
            u = _mm256_fmadd_ps(h1, _mm256_loadu_ps(x + 40), u);
            t = _mm256_fmadd_ps(l2, _mm256_loadu_ps(x + 16), t);
            u = _mm256_fmadd_ps(h2, _mm256_loadu_ps(x + 48), u);
            t = _mm256_fmadd_ps(l3, _mm256_loadu_ps(x + 24), t);
            u = _mm256_fmadd_ps(h3, _mm256_loadu_ps(x + 56), u);
            acc[r] = _mm256_fmadd_ps(_mm256_add_ps(t, u), sv, acc[r]);
            acc[r] = _mm256_fmadd_ps(cv, _mm256_loadu_ps(in[r].xl + p * 8), acc[r]);
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = hsum256(acc[r]);
}
#endif

#if defined(WB_INT4_Q16)
/* One weight row of an int4 product against M inputs with AVX2's integer dot products: the pair's 64 levels widened
 * once to 16-bit words (4 vectors), then per input 4 products of pairs of words summed to 32 bits (vpmaddwd: 16
 * products an instruction, where an FMA makes 8, and exact) against its 16-bit levels; as the bytes interleave the
 * two blocks two at a time, the 32-bit lanes alternate: even lanes block a, odd block b. Per block, scale * d *
 * sum(q xq) + (zero - 8 scale) * sum(x), the last with the exact input sum. */
static inline __attribute__((always_inline)) void dot_int4_rows_q16(const uint8_t *blk, const wb_input *in,
                                                                     const int M, int64_t pairs, float *y,
                                                                     int64_t ystride) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    __m256 acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *b = blk + p * 48;
        _mm_prefetch((const char *)(b + AHEAD), _MM_HINT_T0);
        const __m256i raw = _mm256_loadu_si256((const __m256i *)b);
        const __m256i lo = _mm256_and_si256(raw, low), hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        const __m256i w0 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(lo));
        const __m256i w1 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(lo, 1));
        const __m256i w2 = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(hi));
        const __m256i w3 = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(hi, 1));
        const __m128 s = _mm_castpd_ps(_mm_load_sd((const double *)(b + 32))); /* scale a, scale b */
        const __m128 zz = _mm_castpd_ps(_mm_load_sd((const double *)(b + 40)));
        const __m128 c = _mm_fmadd_ps(s, _mm_set1_ps(128.f), zz); /* zero - 8 scale, see pack_int4 */
        const __m256 sv = _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(s)));
        const __m256 cv = _mm256_castpd_ps(_mm256_broadcastsd_pd(_mm_castps_pd(c)));
        for (int r = 0; r < M; r++) {
            const __m256i *x = (const __m256i *)((const int16_t *)in[r].xf + p * 64);
            const double *d = (const double *)(in[r].xl + p * 4); /* (d a, d b), (sum a / 4, sum b / 4) */
            const __m256i t01 = _mm256_add_epi32(_mm256_madd_epi16(w0, _mm256_loadu_si256(x)),
                                                 _mm256_madd_epi16(w1, _mm256_loadu_si256(x + 1)));
            const __m256i t23 = _mm256_add_epi32(_mm256_madd_epi16(w2, _mm256_loadu_si256(x + 2)),
                                                 _mm256_madd_epi16(w3, _mm256_loadu_si256(x + 3)));
            const __m256i t = _mm256_add_epi32(t01, t23);
            const __m256 dv = _mm256_mul_ps(sv, _mm256_castpd_ps(_mm256_broadcast_sd(d)));
            acc[r] = _mm256_fmadd_ps(cv, _mm256_castpd_ps(_mm256_broadcast_sd(d + 1)),
                                     _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), dv, acc[r]));
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = hsum256(acc[r]);
}
#endif

#if defined(WB_NEON)
/* dot_int4_rows_avx2 on ARM64: each of its 8-lane vectors as two NEON vectors of 4 (half 0: lanes 0-3, half 1: lanes
 * 4-7), so xf and xl are read as the AVX2 kernel reads them and lanes 0, 1 of each half hold block a, 2, 3 block b. */
static inline __attribute__((always_inline)) void dot_int4_rows_neon(const uint8_t *blk, const wb_input *in,
                                                                      const int M, int64_t pairs, float *y,
                                                                      int64_t ystride) {
    const uint8x16_t low = vdupq_n_u8(0x0f);
    float32x4_t acc[MAXROWS][2];
    for (int r = 0; r < M; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.f);
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *b = blk + p * 48;
        __builtin_prefetch(b + AHEAD);
        const uint8x16_t r0 = vld1q_u8(b), r1 = vld1q_u8(b + 16);
        const uint8x16_t nib[4] = {vandq_u8(r0, low), vandq_u8(r1, low), vshrq_n_u8(r0, 4), vshrq_n_u8(r1, 4)};
        float32x4_t w[16]; /* w[4 * j + i]: bytes 4i..4i+3 of nib[j] as fp32 (l then h, as the AVX2 kernel's l0-l3, h0-h3) */
        for (int j = 0; j < 4; j++) {
            const uint16x8_t a = vmovl_u8(vget_low_u8(nib[j])), c = vmovl_u8(vget_high_u8(nib[j]));
            w[4 * j] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(a)));
            w[4 * j + 1] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(a)));
            w[4 * j + 2] = vcvtq_f32_u32(vmovl_u16(vget_low_u16(c)));
            w[4 * j + 3] = vcvtq_f32_u32(vmovl_u16(vget_high_u16(c)));
        }
        float s[2], zz[2];
        memcpy(s, b + 32, 8);
        memcpy(zz, b + 40, 8);
        const float ca = zz[0] + 128.f * s[0], cb = zz[1] + 128.f * s[1]; /* zero - 8 * scale, see pack_int4 */
        const float sl[4] = {s[0], s[0], s[1], s[1]}, cl[4] = {ca, ca, cb, cb};
        const float32x4_t sv = vld1q_f32(sl), cv = vld1q_f32(cl);
        for (int r = 0; r < M; r++) {
            const float *x = in[r].xf + p * 64, *xl = in[r].xl + p * 8;
            for (int h = 0; h < 2; h++) { /* 8-lane vector v of the AVX2 kernel, half h: w[2 v + h] against x[8 v + 4 h] */
                float32x4_t t = vmulq_f32(w[h], vld1q_f32(x + 4 * h));
                float32x4_t u = vmulq_f32(w[8 + h], vld1q_f32(x + 32 + 4 * h));
                for (int v = 1; v < 4; v++) {
                    t = vfmaq_f32(t, w[2 * v + h], vld1q_f32(x + 8 * v + 4 * h));
                    u = vfmaq_f32(u, w[8 + 2 * v + h], vld1q_f32(x + 32 + 8 * v + 4 * h));
                }
                acc[r][h] = vfmaq_f32(acc[r][h], vaddq_f32(t, u), sv);
                acc[r][h] = vfmaq_f32(acc[r][h], cv, vld1q_f32(xl + 4 * h));
            }
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = vaddvq_f32(vaddq_f32(acc[r][0], acc[r][1]));
}
#endif

/* Outputs of an int4 product for `rows` (1 or 2) consecutive rows from `blk` (k / 64 pairs each, `row` bytes apart).
 * Each byte of levels is widened to a 16-bit word w; (w & 15) | 0x4300 is the bf16 number 128 + q of its low nibble,
 * and (w >> 4) | 0x4000 (one funnel shift) the bf16 number 2 + q / 64 of its high nibble, both exact, met by inputs
 * stored times 64; so a bf16 dot product (AVX512-BF16) multiplies levels by inputs with no conversion to float: per
 * pair of blocks one widening, two bit operations, two dot products and two multiply-adds, under half the work of
 * converting levels to fp32. The 128 comes back out through zz (per block: s * sum((128 + q) x) + zz * sum(x) =
 * sum(((q - 8) * scale + zero) x)). Two rows and alternating accumulators: four independent chains. */
static inline void dot_int4(const uint8_t *blk, int64_t row, int rows, const wb_input *in, int64_t pairs, float *y) {
#if defined(WB_INT4_512)
    const __m512i low = _mm512_set1_epi16(0x0f), magic = _mm512_set1_epi16(0x4300), four = _mm512_set1_epi16(4);
    __m512 acc[2][2] = {{_mm512_setzero_ps(), _mm512_setzero_ps()}, {_mm512_setzero_ps(), _mm512_setzero_ps()}};
    for (int64_t p = 0; p < pairs; p++) {
        const __m512bh xl = (__m512bh)_mm512_loadu_si512(in->xb + p * 64);
        const __m512bh xh = (__m512bh)_mm512_loadu_si512(in->xb + p * 64 + 32);
        double xs;
        memcpy(&xs, in->xs8 + 2 * p, 8);
        const __m512 xsv = _mm512_castpd_ps(_mm512_set1_pd(xs));
        for (int r = 0; r < rows; r++) {
            const uint8_t *b = blk + r * row + p * 48;
            _mm_prefetch((const char *)(b + AHEAD), _MM_HINT_T0);
            const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)b));
            const __m512i lo = _mm512_ternarylogic_epi32(w, low, magic, 0xEA); /* (w & low) | magic */
            const __m512i hi = _mm512_shrdi_epi16(w, four, 4); /* (w >> 4) | 0x4000: 2 + q / 64 */
            __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)lo, xl);
            t = _mm512_dpbf16_ps(t, (__m512bh)hi, xh);
            double s, zz;
            memcpy(&s, b + 32, 8);
            memcpy(&zz, b + 40, 8);
            __m512 a = _mm512_fmadd_ps(t, _mm512_castpd_ps(_mm512_set1_pd(s)), acc[r][p & 1]);
            acc[r][p & 1] = _mm512_fmadd_ps(_mm512_castpd_ps(_mm512_set1_pd(zz)), xsv, a);
        }
    }
    for (int r = 0; r < rows; r++) y[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
#elif defined(WB_INT4_Q16)
    for (int r = 0; r < rows; r++) dot_int4_rows_q16(blk + r * row, in, 1, pairs, y + r, 1);
#elif defined(WB_INT4_AVX2)
    for (int r = 0; r < rows; r++) dot_int4_rows_avx2(blk + r * row, in, 1, pairs, y + r, 1);
#elif defined(WB_NEON)
    for (int r = 0; r < rows; r++) dot_int4_rows_neon(blk + r * row, in, 1, pairs, y + r, 1);
#else
    for (int r = 0; r < rows; r++) {
        float acc = 0.f;
        for (int64_t p = 0; p < pairs; p++) {
            const uint8_t *b = blk + r * row + p * 48;
            float t[2] = {0.f, 0.f}, s[2], zz[2];
            for (int w = 0; w < 32; w++) { /* word w meets xb[w] (low nibble) and xb[32 + w] (high nibble) */
                uint32_t ul = (uint32_t)in->xb[p * 64 + w] << 16, uh = (uint32_t)in->xb[p * 64 + 32 + w] << 16;
                float xl, xh;
                memcpy(&xl, &ul, 4);
                memcpy(&xh, &uh, 4);
                t[(w >> 1) & 1] += (128.f + (float)(b[w] & 15)) * xl + (2.f + (float)(b[w] >> 4) / 64.f) * xh;
            }
            memcpy(s, b + 32, 8);
            memcpy(zz, b + 40, 8);
            acc += s[0] * t[0] + s[1] * t[1] + 8.f * (zz[0] * in->xs8[2 * p] + zz[1] * in->xs8[2 * p + 1]);
        }
        y[r] = acc;
    }
#endif
}

/* One output of an int8 product, plain C (the vector kernel is dot_int8_rows). */
static inline float dot_int8(const uint8_t *blk, const float *x, int64_t groups) {
    float acc = 0.f;
    for (int64_t g = 0; g < groups; g++, blk += 36) {
        const int8_t *q = (const int8_t *)blk;
        float t = 0.f, d;
        for (int j = 0; j < BLOCK; j++) t += (float)q[j] * x[g * BLOCK + j];
        memcpy(&d, blk + 32, 4);
        acc += d * t;
    }
    return acc;
}

static inline float dot_f32(const float *a, const float *b, int64_t n) {
    int64_t i = 0;
    float s = 0.f;
#ifdef __AVX512F__
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    s = _mm512_reduce_add_ps(acc);
#elif defined(WB_AVX2)
    __m256 acc = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc2);
    }
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    s = hsum256(_mm256_add_ps(acc, acc2));
#elif defined(WB_NEON)
    float32x4_t acc = vdupq_n_f32(0.f), acc2 = vdupq_n_f32(0.f);
    for (; i + 8 <= n; i += 8) {
        acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
        acc2 = vfmaq_f32(acc2, vld1q_f32(a + i + 4), vld1q_f32(b + i + 4));
    }
    for (; i + 4 <= n; i += 4) acc = vfmaq_f32(acc, vld1q_f32(a + i), vld1q_f32(b + i));
    s = vaddvq_f32(vaddq_f32(acc, acc2));
#endif
    for (; i < n; i++) s += a[i] * b[i];
    return s;
}

/* One weight row of an int4 product against the inputs of M batch rows: the levels are widened once and each input
 * takes its two dot products and two multiply-adds (M independent chains). Inlined with a constant M, so the
 * accumulators stay in registers. */
static inline __attribute__((always_inline)) void dot_int4_rows(const uint8_t *blk, const wb_input *in, const int M,
                                                                 int64_t pairs, float *y, int64_t ystride) {
#if defined(WB_INT4_512)
    const __m512i low = _mm512_set1_epi16(0x0f), magic = _mm512_set1_epi16(0x4300), four = _mm512_set1_epi16(4);
    __m512 acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; p++) {
        const uint8_t *b = blk + p * 48;
        _mm_prefetch((const char *)(b + AHEAD), _MM_HINT_T0);
        const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)b));
        const __m512bh lo = (__m512bh)_mm512_ternarylogic_epi32(w, low, magic, 0xEA);
        const __m512bh hi = (__m512bh)_mm512_shrdi_epi16(w, four, 4);
        double s, zz;
        memcpy(&s, b + 32, 8);
        memcpy(&zz, b + 40, 8);
        const __m512 sv = _mm512_castpd_ps(_mm512_set1_pd(s)), zv = _mm512_castpd_ps(_mm512_set1_pd(zz));
        for (int r = 0; r < M; r++) {
            __m512 t = _mm512_dpbf16_ps(_mm512_setzero_ps(), lo, (__m512bh)_mm512_loadu_si512(in[r].xb + p * 64));
            t = _mm512_dpbf16_ps(t, hi, (__m512bh)_mm512_loadu_si512(in[r].xb + p * 64 + 32));
            double xs;
            memcpy(&xs, in[r].xs8 + 2 * p, 8);
            acc[r] = _mm512_fmadd_ps(zv, _mm512_castpd_ps(_mm512_set1_pd(xs)), _mm512_fmadd_ps(t, sv, acc[r]));
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = _mm512_reduce_add_ps(acc[r]);
#elif defined(WB_INT4_Q16)
    dot_int4_rows_q16(blk, in, M, pairs, y, ystride);
#elif defined(WB_INT4_AVX2)
    dot_int4_rows_avx2(blk, in, M, pairs, y, ystride);
#elif defined(WB_NEON)
    dot_int4_rows_neon(blk, in, M, pairs, y, ystride);
#else
    for (int r = 0; r < M; r++) dot_int4(blk, 0, 1, &in[r], pairs, y + r * ystride);
#endif
}

/* One weight row of an int8 product against M inputs: the levels converted to fp32 once. */
static inline __attribute__((always_inline)) void dot_int8_rows(const uint8_t *blk, const wb_input *in, const int M,
                                                                 int64_t groups, float *y, int64_t ystride) {
#ifdef __AVX512F__
    __m512 acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t g = 0; g < groups; g++, blk += 36) {
        _mm_prefetch((const char *)(blk + AHEAD), _MM_HINT_T0);
        const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk)));
        const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 16))));
        float d;
        memcpy(&d, blk + 32, 4);
        const __m512 dv = _mm512_set1_ps(d);
        for (int r = 0; r < M; r++) {
            const float *x = in[r].xr + g * BLOCK;
            acc[r] = _mm512_fmadd_ps(dv, _mm512_fmadd_ps(lo, _mm512_loadu_ps(x),
                                                         _mm512_mul_ps(hi, _mm512_loadu_ps(x + 16))), acc[r]);
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = _mm512_reduce_add_ps(acc[r]);
#elif defined(WB_AVX2)
    __m256 acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t g = 0; g < groups; g++, blk += 36) {
        _mm_prefetch((const char *)(blk + AHEAD), _MM_HINT_T0);
        __m256 q[4];
        for (int v = 0; v < 4; v++)
            q[v] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 8 * v))));
        float d;
        memcpy(&d, blk + 32, 4);
        const __m256 dv = _mm256_set1_ps(d);
        for (int r = 0; r < M; r++) {
            const float *x = in[r].xr + g * BLOCK;
            __m256 t = _mm256_mul_ps(q[0], _mm256_loadu_ps(x)), u = _mm256_mul_ps(q[1], _mm256_loadu_ps(x + 8));
            t = _mm256_fmadd_ps(q[2], _mm256_loadu_ps(x + 16), t);
            u = _mm256_fmadd_ps(q[3], _mm256_loadu_ps(x + 24), u);
            acc[r] = _mm256_fmadd_ps(dv, _mm256_add_ps(t, u), acc[r]);
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = hsum256(acc[r]);
#elif defined(WB_NEON)
    float32x4_t acc[MAXROWS];
    for (int r = 0; r < M; r++) acc[r] = vdupq_n_f32(0.f);
    for (int64_t g = 0; g < groups; g++, blk += 36) {
        __builtin_prefetch(blk + AHEAD);
        float32x4_t q[8];
        for (int v = 0; v < 2; v++) {
            const int8x16_t b8 = vld1q_s8((const int8_t *)blk + 16 * v);
            const int16x8_t a = vmovl_s8(vget_low_s8(b8)), c = vmovl_s8(vget_high_s8(b8));
            q[4 * v] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(a)));
            q[4 * v + 1] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(a)));
            q[4 * v + 2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(c)));
            q[4 * v + 3] = vcvtq_f32_s32(vmovl_s16(vget_high_s16(c)));
        }
        float d;
        memcpy(&d, blk + 32, 4);
        for (int r = 0; r < M; r++) {
            const float *x = in[r].xr + g * BLOCK;
            float32x4_t t = vmulq_f32(q[0], vld1q_f32(x)), u = vmulq_f32(q[1], vld1q_f32(x + 4));
            for (int v = 2; v < 8; v += 2) {
                t = vfmaq_f32(t, q[v], vld1q_f32(x + 4 * v));
                u = vfmaq_f32(u, q[v + 1], vld1q_f32(x + 4 * v + 4));
            }
            acc[r] = vfmaq_n_f32(acc[r], vaddq_f32(t, u), d);
        }
    }
    for (int r = 0; r < M; r++) y[r * ystride] = vaddvq_f32(acc[r]);
#else
    for (int r = 0; r < M; r++) y[r * ystride] = dot_int8(blk, in[r].xr, groups);
#endif
}

#define ROWS_CASES(F, ...) \
    switch (M) { \
    case 2: F(__VA_ARGS__, 2); break; \
    case 3: F(__VA_ARGS__, 3); break; \
    case 4: F(__VA_ARGS__, 4); break; \
    case 5: F(__VA_ARGS__, 5); break; \
    case 6: F(__VA_ARGS__, 6); break; \
    case 7: F(__VA_ARGS__, 7); break; \
    default: F(__VA_ARGS__, 8); break; \
    }
#define INT4_ROWS(blk, in, pairs, y, ys, m) dot_int4_rows(blk, in, m, pairs, y, ys)
#define INT8_ROWS(blk, in, groups, y, ys, m) dot_int8_rows(blk, in, m, groups, y, ys)

/* y = m @ x for the prepared inputs of M batch rows; row r's outputs at y + r * ystride. One row: two weight rows at a
 * time (dot_int4); several: each weight row read once for all of them. */
static void product(const wb_mat *m, const wb_input *in, int M, float *y, int64_t ystride, int threads) {
    const int64_t groups = m->k / BLOCK, row = m->kind == INT4 ? groups / 2 * 48 : groups * 36;
    if (M == 1) {
        const int64_t pairs = (m->n + 1) / 2;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t p = 0; p < pairs; p++) {
            const int64_t i = 2 * p;
            const int rows = i + 1 < m->n ? 2 : 1;
            if (m->kind == INT4) {
                dot_int4(m->data + i * row, row, rows, in, groups / 2, y + i);
            } else {
                for (int r = 0; r < rows; r++) dot_int8_rows(m->data + (i + r) * row, in, 1, groups, y + i + r, 1);
            }
        }
        return;
    }
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
    for (int64_t i = 0; i < m->n; i++) {
        if (m->kind == INT4) {
            ROWS_CASES(INT4_ROWS, m->data + i * row, in, groups / 2, y + i, ystride)
        } else {
            ROWS_CASES(INT8_ROWS, m->data + i * row, in, groups, y + i, ystride)
        }
    }
}

/* y[0:n] += scale * B (A x) */
static void add_lora(const wb_lora *l, const float *x, int64_t k, int64_t n, float *y, float *tmp) {
    if (!l->a) return;
    for (int i = 0; i < l->r; i++) tmp[i] = dot_f32(l->a + i * k, x, k);
    for (int64_t o = 0; o < n; o++) y[o] += dot_f32(l->b + o * l->r, tmp, l->r) * l->scale;
}

static void rms_norm(const float *h, const float *w, int64_t n, float eps, float *out) {
    float ss = 0.f;
    for (int64_t i = 0; i < n; i++) ss += h[i] * h[i];
    const float r = 1.f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++) out[i] = w[i] * (h[i] * r);
}

static void rotate(float *x, const float *cs, const float *sn, int64_t d) {
    const int64_t half = d / 2;
    for (int64_t i = 0; i < half; i++) {
        const float a = x[i], b = x[i + half];
        x[i] = a * cs[i] - b * sn[i];
        x[i + half] = b * cs[i] + a * sn[i];
    }
}

#ifdef __AVX512F__
/* e^x, 16 lanes (Cephes' expf: x = n ln 2 + r, a degree-6 polynomial in r, times 2^n; about 1 ulp), x >= -87.3. */
static inline __m512 exp512(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
    return _mm512_scalef_ps(p, n);
}

/* The 16 sums of v[0..15]'s lanes, in order: a tree of shuffles and adds (46 operations for 16 sums, where one
 * horizontal sum each takes about 8). */
static inline __m512 sums16(const __m512 *v) {
    __m512 u[8], w[4], x[2];
    for (int i = 0; i < 8; i++) /* 256-bit halves: u[i] = [v[2i]'s 8 partial sums | v[2i+1]'s] */
        u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(v[2 * i], v[2 * i + 1], 0xEE));
    for (int i = 0; i < 4; i++) /* 128-bit quarters: w[i] = 4 partial sums each of v[4i..4i+3] */
        w[i] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * i], u[2 * i + 1], 0xDD));
    for (int i = 0; i < 2; i++) /* quarter q: 2 partial sums of v[8i + q], then 2 of v[8i + 4 + q] */
        x[i] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0x44),
                             _mm512_shuffle_ps(w[2 * i], w[2 * i + 1], 0xEE));
    /* lane 4q + j holds the sum of v[4j + q]: put it at lane 4j + q */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], 0x88), _mm512_shuffle_ps(x[0], x[1], 0xDD));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), z);
}
#elif defined(WB_AVX2)
/* exp512's method on 8 lanes; 2^n built in the exponent bits (x clamped to [-87.3, 88]: n stays a normal power). */
static inline __m256 exp256(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}
#endif

/* The query heads q[0..G-1] (d floats each, one after another) that share one key/value head, over its cache:
 * softmax(q_g k^T * scale, padding masked) v into out + g * d; s: G x T floats scratch. The heads go over the cache
 * together, a block of keys (then of values) at a time for all of them, so each key and value is read from memory
 * once for the group (a 1,000-token head's keys and values, 512 KB, do not stay in a core's L2 for the next head). */
static void attend(const float *q, int G, const float *k, const float *v, const int64_t *mask, int64_t T, int64_t d,
                   float scale, float *s, float *out) {
    int64_t t = 0;
#ifdef __AVX512F__
    if (d == 64) { /* the default model's head: 16 keys at a time, their 16 dot products summed by one tree */
        for (; t + 16 <= T; t += 16)
            for (int g = 0; g < G; g++) {
                const float *qg = q + g * 64;
                const __m512 q0 = _mm512_loadu_ps(qg), q1 = _mm512_loadu_ps(qg + 16), q2 = _mm512_loadu_ps(qg + 32),
                             q3 = _mm512_loadu_ps(qg + 48);
                __m512 part[16];
                for (int i = 0; i < 16; i++) {
                    const float *kt = k + (t + i) * 64;
                    part[i] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(kt + 16), _mm512_mul_ps(q0, _mm512_loadu_ps(kt)));
                    part[i] = _mm512_fmadd_ps(q2, _mm512_loadu_ps(kt + 32), part[i]);
                    part[i] = _mm512_fmadd_ps(q3, _mm512_loadu_ps(kt + 48), part[i]);
                }
                _mm512_storeu_ps(s + g * T + t, _mm512_mul_ps(sums16(part), _mm512_set1_ps(scale)));
            }
    }
#elif defined(WB_AVX2)
    if (d == 64) { /* 8 keys at a time, their 8 dot products summed by one tree of horizontal adds */
        for (; t + 8 <= T; t += 8)
            for (int g = 0; g < G; g++) {
                const float *qg = q + g * 64;
                __m256 part[8];
                for (int i = 0; i < 8; i++) {
                    const float *kt = k + (t + i) * 64;
                    __m256 a = _mm256_mul_ps(_mm256_loadu_ps(qg), _mm256_loadu_ps(kt));
                    __m256 b = _mm256_mul_ps(_mm256_loadu_ps(qg + 8), _mm256_loadu_ps(kt + 8));
                    for (int j = 2; j < 8; j += 2) {
                        a = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j), _mm256_loadu_ps(kt + 8 * j), a);
                        b = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8 * j + 8), _mm256_loadu_ps(kt + 8 * j + 8), b);
                    }
                    part[i] = _mm256_add_ps(a, b);
                }
                const __m256 h0 = _mm256_hadd_ps(_mm256_hadd_ps(part[0], part[1]), _mm256_hadd_ps(part[2], part[3]));
                const __m256 h1 = _mm256_hadd_ps(_mm256_hadd_ps(part[4], part[5]), _mm256_hadd_ps(part[6], part[7]));
                /* h0 = [keys 0-3, first halves | keys 0-3, second halves], h1 likewise for keys 4-7 */
                const __m256 sum = _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                                                 _mm256_permute2f128_ps(h0, h1, 0x31));
                _mm256_storeu_ps(s + g * T + t, _mm256_mul_ps(sum, _mm256_set1_ps(scale)));
            }
    }
#endif
    for (int g = 0; g < G; g++)
        for (int64_t u = t; u < T; u++) s[g * T + u] = dot_f32(q + g * d, k + u * d, d) * scale;
    float inv[MAXGROUP];
    for (int g = 0; g < G; g++) { /* softmax over each head's scores, in place (masked positions 0) */
        float *sg = s + g * T, top = -INFINITY, sum = 0.f;
        for (int64_t u = 0; u < T; u++) {
            if (!mask[u]) sg[u] = -INFINITY;
            else if (sg[u] > top) top = sg[u];
        }
        int64_t u = 0;
#ifdef __AVX512F__
        {
            __m512 acc = _mm512_setzero_ps();
            for (; u + 16 <= T; u += 16) {
                const __m512 x = _mm512_loadu_ps(sg + u);
                const __m512 e = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ),
                                                     exp512(_mm512_sub_ps(x, _mm512_set1_ps(top))));
                _mm512_storeu_ps(sg + u, e);
                acc = _mm512_add_ps(acc, e);
            }
            sum = _mm512_reduce_add_ps(acc);
        }
#elif defined(WB_AVX2)
        {
            __m256 acc = _mm256_setzero_ps();
            for (; u + 8 <= T; u += 8) {
                const __m256 x = _mm256_loadu_ps(sg + u);
                const __m256 e = _mm256_and_ps(_mm256_cmp_ps(x, _mm256_set1_ps(-INFINITY), _CMP_NEQ_OQ),
                                               exp256(_mm256_sub_ps(x, _mm256_set1_ps(top))));
                _mm256_storeu_ps(sg + u, e);
                acc = _mm256_add_ps(acc, e);
            }
            sum = hsum256(acc);
        }
#endif
        for (; u < T; u++) sum += (sg[u] = mask[u] ? expf(sg[u] - top) : 0.f);
        inv[g] = 1.f / sum;
        memset(out + g * d, 0, sizeof(float) * d);
    }
    enum { VBLOCK = 16 }; /* values a head takes in turn before the next head: 4 KB at d = 64, in L1 for all */
    for (int64_t t0 = 0; t0 < T; t0 += VBLOCK) {
        const int64_t t1 = t0 + VBLOCK < T ? t0 + VBLOCK : T;
        for (int g = 0; g < G; g++) {
            const float *sg = s + g * T;
            float *og = out + g * d;
#if defined(WB_AVX2) && !defined(__AVX512F__)
            if (d == 64) { /* the weighted sum of the block's values in 8 registers */
                __m256 o[8];
                for (int j = 0; j < 8; j++) o[j] = _mm256_loadu_ps(og + 8 * j);
                for (int64_t u = t0; u < t1; u++) {
                    if (sg[u] == 0.f) continue;
                    const __m256 pv = _mm256_set1_ps(sg[u] * inv[g]);
                    const float *vt = v + u * 64;
                    for (int j = 0; j < 8; j++) o[j] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vt + 8 * j), o[j]);
                }
                for (int j = 0; j < 8; j++) _mm256_storeu_ps(og + 8 * j, o[j]);
                continue;
            }
#endif
            for (int64_t u = t0; u < t1; u++) {
                if (sg[u] == 0.f) continue;
                const float p = sg[u] * inv[g], *vt = v + u * d;
                for (int64_t j = 0; j < d; j++) og[j] += p * vt[j];
            }
        }
    }
}

/* out = silu(gate) * up, n entries */
static void silu_mul(const float *gate, const float *up, int64_t n, float *out) {
    int64_t i = 0;
#ifdef __AVX512F__
    for (; i + 16 <= n; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.f), e)),
                                                _mm512_loadu_ps(up + i)));
    }
#elif defined(WB_AVX2)
    for (; i + 8 <= n; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), g));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.f), e)),
                                                _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < n; i++) out[i] = gate[i] / (1.f + expf(-gate[i])) * up[i];
}

/* The step for `rows` batch rows (1..MAXROWS). kcache[l] / vcache[l]: layer l's buffers, rows x kv_heads x cap x
 * head_dim, positions 0..n-1 filled; mask: rows x (n + 1) (0 = a padding position the row must not attend to); tokens,
 * pos: each row's new token and its position; logits: rows x vocab floats out. Returns 0, -1 when out of memory, -2 for
 * a row count out of range. */
int wb_step(const wb_model *m, float *const *kcache, float *const *vcache, int64_t rows, int64_t cap, int64_t n,
            const int64_t *mask, const int64_t *tokens, const int64_t *pos, float *logits, int threads) {
    if (rows < 1 || rows > MAXROWS) return -2;
    const int M = (int)rows;
    const int64_t H = m->hidden, D = m->head_dim, NQ = m->heads * D, NK = m->kv_heads * D, I = m->inter;
    const int64_t T = n + 1, per_kv = m->heads / m->kv_heads, per_row = m->kv_heads * cap * D;
    /* query heads that share a kv head go over its cache together, at most MAXGROUP at a time */
    int64_t groups = 1;
    while (per_kv / groups > MAXGROUP || per_kv % groups) groups++;
    const int64_t per_group = per_kv / groups;
    const int64_t big = I > NQ + 2 * NK ? I : NQ + 2 * NK, W = I > H ? (I > NQ ? I : NQ) : (H > NQ ? H : NQ);
    /* per row: h, x | xr, xs8, xb | qkv | gate and up | act | att | cos, sin | LoRA scratch (rank <= 256) | xf, xl */
    const int64_t R = 2 * H + 2 * W + W / BLOCK + 8 + big + 3 * I + NQ + 2 * D + 256 + W + W / 8 + 8;
    float *work = malloc(sizeof(float) * (size_t)(rows * R + rows * m->heads * T));
    if (!work) return -1;
    float *scores = work + rows * R;
    wb_input in[MAXROWS];
#define ROW(r, off) (work + (r) * R + (off))
    const int64_t oX = H, oXR = 2 * H, oXS = oXR + W, oXB = oXS + W / BLOCK + 8, oQKV = oXB + W, oGU = oQKV + big;
    const int64_t oACT = oGU + 2 * I, oATT = oACT + I, oCS = oATT + NQ, oSN = oCS + D, oTMP = oSN + D;
    const int64_t oXF = oTMP + 256, oXL = oXF + W;
    for (int r = 0; r < M; r++) {
        in[r] = (wb_input){ROW(r, oXR), ROW(r, oXS), (uint16_t *)ROW(r, oXB), ROW(r, oXF), ROW(r, oXL)};
        memcpy(ROW(r, 0), m->embed + tokens[r] * H, sizeof(float) * H);
        float *cs = ROW(r, oCS), *sn = ROW(r, oSN);
        for (int64_t i = 0; i < D / 2; i++) {
            const float f = (float)pos[r] * m->inv_freq[i];
            cs[i] = cs[i + D / 2] = cosf(f) * m->rope_scale;
            sn[i] = sn[i + D / 2] = sinf(f) * m->rope_scale;
        }
    }
    for (int64_t l = 0; l < m->layers; l++) {
        const wb_layer *L = &m->layer[l];
        for (int r = 0; r < M; r++) {
            rms_norm(ROW(r, 0), L->norm1, H, m->eps, ROW(r, oX));
            prepare(ROW(r, oX), H, &in[r]);
        }
        product(&L->qkv, in, M, ROW(0, oQKV), R, threads);
        for (int r = 0; r < M; r++) {
            float *x = ROW(r, oX), *q = ROW(r, oQKV), *k = q + NQ, *v = k + NK, *tmp = ROW(r, oTMP);
            float *kc = kcache[l] + r * per_row, *vc = vcache[l] + r * per_row;
            add_lora(&L->lora[0], x, H, NQ, q, tmp);
            add_lora(&L->lora[1], x, H, NK, k, tmp);
            add_lora(&L->lora[2], x, H, NK, v, tmp);
            for (int64_t a = 0; a < m->heads; a++) rotate(q + a * D, ROW(r, oCS), ROW(r, oSN), D);
            for (int64_t a = 0; a < m->kv_heads; a++) {
                rotate(k + a * D, ROW(r, oCS), ROW(r, oSN), D);
                memcpy(kc + (a * cap + n) * D, k + a * D, sizeof(float) * D);
                memcpy(vc + (a * cap + n) * D, v + a * D, sizeof(float) * D);
            }
        }
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
        for (int64_t rg = 0; rg < rows * m->kv_heads * groups; rg++) { /* a row's query heads that share a kv head */
            const int64_t r = rg / (m->kv_heads * groups), b = rg % (m->kv_heads * groups), h = b / groups;
            const int64_t a = h * per_kv + (b % groups) * per_group, kv = r * per_row + h * cap * D;
            attend(ROW(r, oQKV) + a * D, (int)per_group, kcache[l] + kv, vcache[l] + kv, mask + r * T, T, D,
                   m->attn_scale, scores + (r * m->heads + a) * T, ROW(r, oATT) + a * D);
        }
        for (int r = 0; r < M; r++) prepare(ROW(r, oATT), NQ, &in[r]);
        product(&L->o, in, M, ROW(0, oX), R, threads);
        for (int r = 0; r < M; r++) {
            float *h = ROW(r, 0), *x = ROW(r, oX);
            add_lora(&L->lora[3], ROW(r, oATT), NQ, H, x, ROW(r, oTMP));
            for (int64_t i = 0; i < H; i++) h[i] += x[i];
            rms_norm(h, L->norm2, H, m->eps, x);
            prepare(x, H, &in[r]);
        }
        product(&L->gate_up, in, M, ROW(0, oGU), R, threads);
        for (int r = 0; r < M; r++) {
            float *x = ROW(r, oX), *gu = ROW(r, oGU), *tmp = ROW(r, oTMP);
            add_lora(&L->lora[4], x, H, I, gu, tmp);
            add_lora(&L->lora[5], x, H, I, gu + I, tmp);
            silu_mul(gu, gu + I, I, ROW(r, oACT));
            prepare(ROW(r, oACT), I, &in[r]);
        }
        product(&L->down, in, M, ROW(0, oX), R, threads);
        for (int r = 0; r < M; r++) {
            float *h = ROW(r, 0), *x = ROW(r, oX);
            add_lora(&L->lora[6], ROW(r, oACT), I, H, x, ROW(r, oTMP));
            for (int64_t i = 0; i < H; i++) h[i] += x[i];
        }
    }
    for (int r = 0; r < M; r++) {
        rms_norm(ROW(r, 0), m->final_norm, H, m->eps, ROW(r, oX));
        prepare(ROW(r, oX), H, &in[r]);
    }
    product(&m->head, in, M, logits, m->vocab, threads);
#undef ROW
    free(work);
    return 0;
}
