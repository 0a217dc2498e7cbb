/* json_skip.c - skips a nested container 64 bytes at a time: masks of quotes and brackets
 * (AVX2 where the CPU has it, else SSE2, else bytes), strings by prefix XOR of the quote
 * mask, brackets counted by popcount. A block holding a backslash, and the tail, go byte
 * by byte. */
#include "json_skip.h"

#include <stdint.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1
#endif

/* Byte-by-byte state, shared with the block path. */
struct skip {
    long depth;
    int in_string, escaped;
};

/* Advances st over p[0..n); returns the offset one past the closing bracket, or -1. */
static long bytes(struct skip *st, const char *p, long n)
{
    for (long i = 0; i < n; i++) {
        char c = p[i];
        if (st->in_string) {
            if (st->escaped) st->escaped = 0;
            else if (c == '\\') st->escaped = 1;
            else if (c == '"') st->in_string = 0;
        } else if (c == '"') {
            st->in_string = 1;
        } else if (c == '{' || c == '[') {
            st->depth++;
        } else if ((c == '}' || c == ']') && --st->depth == 0) {
            return i + 1;
        }
    }
    return -1;
}

struct masks {
    uint64_t quote, backslash, open, close;
};

/* '{' and '[' (and '}' and ']') differ only in bit 0x20: one compare after an OR finds both. */
static void block_masks(const char *p, struct masks *m)
{
#ifdef __SSE2__
    const __m128i quote = _mm_set1_epi8('"'), bs = _mm_set1_epi8('\\'), low = _mm_set1_epi8(0x20);
    const __m128i open = _mm_set1_epi8('{'), close = _mm_set1_epi8('}');
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 4; i++) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(p + 16 * i)), l = _mm_or_si128(v, low);
        m->quote |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote)) << (16 * i);
        m->backslash |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, bs)) << (16 * i);
        m->open |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(l, open)) << (16 * i);
        m->close |= (uint64_t)(uint16_t)_mm_movemask_epi8(_mm_cmpeq_epi8(l, close)) << (16 * i);
    }
#else
    memset(m, 0, sizeof *m);
    for (int i = 0; i < 64; i++) {
        uint64_t b = (uint64_t)1 << i;
        char c = p[i];
        if (c == '"') m->quote |= b;
        else if (c == '\\') m->backslash |= b;
        else if ((c | 0x20) == '{') m->open |= b;
        else if ((c | 0x20) == '}') m->close |= b;
    }
#endif
}

/* Bit i = XOR of bits 0..i: set from an opening quote up to (not including) its closing one. */
static uint64_t prefix_xor(uint64_t x)
{
    x ^= x << 1;
    x ^= x << 2;
    x ^= x << 4;
    x ^= x << 8;
    x ^= x << 16;
    x ^= x << 32;
    return x;
}

/* The offset one past the first bracket at which depth falls to 0 (open and close hold
 * brackets outside strings, 0 < depth), or -1: one step per bracket. */
static long first_close_bits(long depth, uint64_t open, uint64_t close)
{
    for (uint64_t all = open | close; all; all &= all - 1) {
        int i = __builtin_ctzll(all);
        if (open >> i & 1) depth++;
        else if (--depth == 0) return i + 1;
    }
    return -1;
}

/* One block of 64 bytes at q with its masks: returns the offset one past the closing
 * bracket, or -1 (st updated). Inlined into each driver, so the counts use its popcount;
 * first_close finds the closing bracket in a block that may hold it. */
static inline __attribute__((always_inline)) long block(struct skip *st, const struct masks *m, const char *q,
                                                        uint64_t (*pxor)(uint64_t),
                                                        long (*first_close)(long, uint64_t, uint64_t))
{
    if (m->backslash || st->escaped) return bytes(st, q, 64); /* rare: escapes decide which quotes count */
    uint64_t in = pxor(m->quote) ^ (st->in_string ? ~(uint64_t)0 : 0);
    uint64_t open = m->open & ~in, close = m->close & ~in;
    long nclose = __builtin_popcountll(close);
    st->in_string = (int)(in >> 63);
    if (st->depth > nclose) { /* cannot close within this block */
        st->depth += __builtin_popcountll(open) - nclose;
        return -1;
    }
    /* depth is 0 only before the opening bracket: the first block goes bit by bit */
    long r = st->depth > 0 ? first_close(st->depth, open, close) : first_close_bits(st->depth, open, close);
    if (r < 0) st->depth += __builtin_popcountll(open) - nclose;
    return r;
}

static const char *skip_blocks(const char *p, const char *end)
{
    struct skip st = {0, 0, 0};
    struct masks m;
    long r;
    for (; end - p >= 64; p += 64) {
        block_masks(p, &m);
        if ((r = block(&st, &m, p, prefix_xor, first_close_bits)) >= 0) return p + r;
    }
    r = bytes(&st, p, end - p);
    return r >= 0 ? p + r : NULL;
}

#ifdef HAVE_AVX2_PATH
/* prefix_xor in one carry-less multiply by all ones. */
__attribute__((target("pclmul,sse2"))) static inline uint64_t prefix_xor_clmul(uint64_t x)
{
    return (uint64_t)_mm_cvtsi128_si64(_mm_clmulepi64_si128(_mm_set_epi64x(0, (long long)x), _mm_set1_epi8(-1), 0));
}

/* Bytes of the vector -1 where m has its bit (bit i of m is byte i). */
__attribute__((target("avx2"))) static inline __m256i expand32(uint32_t m)
{
    const __m256i which = _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)m), which); /* byte i holds byte i/8 of m */
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
}

/* Running sums of the signed bytes of v (each |sum| <= 64 here), carry added to every byte. */
__attribute__((target("avx2"))) static inline __m256i prefix_sum(__m256i v, __m256i carry)
{
    v = _mm256_add_epi8(v, _mm256_slli_si256(v, 1));
    v = _mm256_add_epi8(v, _mm256_slli_si256(v, 2));
    v = _mm256_add_epi8(v, _mm256_slli_si256(v, 4));
    v = _mm256_add_epi8(v, _mm256_slli_si256(v, 8));
    /* the high lane continues from the low lane's last byte */
    __m256i low_last = _mm256_shuffle_epi8(_mm256_permute2x128_si256(v, v, 0x08), _mm256_set1_epi8(15));
    return _mm256_add_epi8(_mm256_add_epi8(v, low_last), carry);
}

/* first_close_bits in a fixed number of steps whatever the brackets: +1 per '{'/'[' and -1
 * per '}'/']' as bytes, running sums, and the first byte where the sum is -depth (it moves
 * by one, so it meets -depth before it passes it). The caller ensures depth <= 64. */
__attribute__((target("avx2,bmi"))) static long first_close_avx2(long depth, uint64_t open, uint64_t close)
{
    __m256i a = _mm256_sub_epi8(expand32((uint32_t)close), expand32((uint32_t)open));
    __m256i b = _mm256_sub_epi8(expand32((uint32_t)(close >> 32)), expand32((uint32_t)(open >> 32)));
    __m256i target = _mm256_set1_epi8((char)-depth);
    a = prefix_sum(a, _mm256_setzero_si256());
    b = prefix_sum(b, _mm256_set1_epi8((char)_mm256_extract_epi8(a, 31)));
    uint64_t hit = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(a, target)) |
                   (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(b, target)) << 32;
    return hit ? __builtin_ctzll(hit) + 1 : -1;
}

__attribute__((target("avx2,popcnt,bmi,pclmul"))) static const char *skip_avx2(const char *p, const char *end)
{
    const __m256i quote = _mm256_set1_epi8('"'), bs = _mm256_set1_epi8('\\'), low = _mm256_set1_epi8(0x20);
    const __m256i open = _mm256_set1_epi8('{'), close = _mm256_set1_epi8('}');
    struct skip st = {0, 0, 0};
    struct masks m;
    long r;
    for (; end - p >= 64; p += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)p);
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(p + 32));
        __m256i la = _mm256_or_si256(a, low), lb = _mm256_or_si256(b, low);
#define MASK(x, y, k) ((uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, k)) | \
                       (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpeq_epi8(y, k)) << 32)
        m.quote = MASK(a, b, quote);
        m.backslash = MASK(a, b, bs);
        m.open = MASK(la, lb, open);
        m.close = MASK(la, lb, close);
#undef MASK
        if ((r = block(&st, &m, p, prefix_xor_clmul, first_close_avx2)) >= 0) return p + r;
    }
    r = bytes(&st, p, end - p);
    return r >= 0 ? p + r : NULL;
}
#endif

const char *wi_json_skip_container(const char *p, const char *end)
{
#ifdef HAVE_AVX2_PATH
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("pclmul"))
        return skip_avx2(p, end);
#endif
    return skip_blocks(p, end);
}

const char *wi_json_skip_portable(const char *p, const char *end)
{
    return skip_blocks(p, end);
}
