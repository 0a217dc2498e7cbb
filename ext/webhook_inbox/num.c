/* num.c - doubles printed like Python: repr's shortest round-trip digits with the Ryu
 * method (Ulf Adams, "Ryu: fast float-to-string conversion", PLDI 2018) and exact integers
 * with a small base-10^9 bignum. Constant work per number; no libc printf or strtod. */
#include "num.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

/* ---- 5^i scaled to 125 significant bits, built once ---- */

#define POW5_BITS 125 /* significant bits kept per power of five */
#define POW5_COUNT 326 /* i up to 325: the smallest binary exponent, -1076, needs 5^325 */

/* Invariant after init: pow5[i] = floor(5^i / 2^(pow5_len[i] - POW5_BITS)) (or 5^i
 * shifted left when it has fewer bits), as {low 64, high 64}; pow5_len[i] = bit length
 * of 5^i. Written once under pthread_once, read-only afterwards. */
static uint64_t pow5[POW5_COUNT][2];
static int pow5_len[POW5_COUNT];
static pthread_once_t pow5_once = PTHREAD_ONCE_INIT;

static void pow5_init(void)
{
    uint32_t limb[26] = {1}; /* 5^i, little-endian base 2^32; 5^325 has 755 bits */
    size_t nl = 1;
    for (int i = 0; i < POW5_COUNT; i++) {
        int len = 32 * (int)(nl - 1);
        for (uint32_t top = limb[nl - 1]; top; top >>= 1) len++;
        uint64_t hi = 0, lo = 0;
        for (int b = len - 1; b >= 0 && b >= len - POW5_BITS; b--) { /* top bits, MSB first */
            hi = hi << 1 | lo >> 63;
            lo = lo << 1 | ((limb[b / 32] >> (b % 32)) & 1);
        }
        for (int b = len; b < POW5_BITS; b++) hi = hi << 1 | lo >> 63, lo <<= 1;
        pow5[i][0] = lo, pow5[i][1] = hi;
        pow5_len[i] = len;
        uint64_t carry = 0;
        for (size_t k = 0; k < nl; k++) {
            uint64_t t = (uint64_t)limb[k] * 5 + carry;
            limb[k] = (uint32_t)t;
            carry = t >> 32;
        }
        if (carry) limb[nl++] = (uint32_t)carry;
    }
}

/* High 64 bits and low 64 bits of a * b. */
static uint64_t mul128(uint64_t a, uint64_t b, uint64_t *hi)
{
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    *hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return (mid << 32) | (uint32_t)p00;
}

/* floor(m * mul / 2^j) for a 128-bit mul, 64 <= j < 128 and m < 2^58. */
static uint64_t mul_shift(uint64_t m, const uint64_t mul[2], int j)
{
    uint64_t h0, h1, l1 = mul128(m, mul[1], &h1);
    (void)mul128(m, mul[0], &h0);
    uint64_t mid = h0 + l1; /* bits 64..127 of the product */
    uint64_t high = h1 + (mid < h0);
    int s = j - 64;
    return s == 0 ? mid : (mid >> s) | (high << (64 - s));
}

/* floor(log10(5^e)) for 0 <= e <= 2620. */
static int log10_pow5(int e) { return (int)(((uint32_t)e * 732923u) >> 20); }

static size_t put_u64(uint64_t v, char *buf)
{
    char t[20];
    size_t n = 0;
    do t[n++] = (char)('0' + v % 10); while (v /= 10);
    for (size_t i = 0; i < n; i++) buf[i] = t[n - 1 - i];
    return n;
}

size_t wi_num_format(int neg, const char *digits, int nd, int decpt, char *buf)
{
    size_t o = 0;
    if (neg) buf[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            buf[o++] = '0', buf[o++] = '.';
            for (int i = 0; i < -decpt; i++) buf[o++] = '0';
            for (int i = 0; i < nd; i++) buf[o++] = digits[i];
        } else {
            for (int i = 0; i < nd; i++) {
                if (i == decpt) buf[o++] = '.';
                buf[o++] = digits[i];
            }
            for (int i = nd; i < decpt; i++) buf[o++] = '0';
        }
        return o;
    }
    int e = decpt - 1;
    buf[o++] = digits[0];
    if (nd > 1) {
        buf[o++] = '.';
        for (int i = 1; i < nd; i++) buf[o++] = digits[i];
    }
    buf[o++] = 'e';
    buf[o++] = e < 0 ? '-' : '+';
    if (e < 0) e = -e;
    if (e < 10) buf[o++] = '0'; /* at least two exponent digits, like repr */
    return o + put_u64((uint64_t)e, buf + o);
}

/* Shortest digits of a finite, nonzero, non-integral double (so its binary exponent is
 * negative): Ryu's interval walk. Stores the digits as an integer and returns the decimal
 * exponent of its last digit. */
static int shortest(double d, uint64_t *out)
{
    uint64_t bits;
    memcpy(&bits, &d, sizeof bits);
    uint64_t frac = bits & ((1ull << 52) - 1);
    int bexp = (int)((bits >> 52) & 0x7ff);
    /* value = m2 * 2^(e2 + 2); work on 4 * m2 so both interval ends are integers */
    uint64_t m2 = bexp ? frac | 1ull << 52 : frac;
    int e2 = (bexp ? bexp : 1) - 1075 - 2;
    int even = (m2 & 1) == 0;
    int mm_shift = frac != 0 || bexp <= 1; /* the lower gap halves at a power of two */
    uint64_t mv = 4 * m2, mp = mv + 2, mm = mv - 1 - (uint64_t)mm_shift;

    /* Scale by 10^-e10 with e10 = q + e2 (< 0): v * 2^e2 / 10^e10 = v * 5^i / 2^q. */
    int q = log10_pow5(-e2) - (-e2 > 1);
    int e10 = q + e2, i = -e2 - q;
    int j = q - (pow5_len[i] - POW5_BITS);
    uint64_t vr = mul_shift(mv, pow5[i], j), vp = mul_shift(mp, pow5[i], j),
             vm = mul_shift(mm, pow5[i], j);
    int vm_tz = 0, vr_tz = 0; /* the dropped digits of vm / vr are all zero (exact) */
    if (q <= 1) { /* every end is an integer multiple of 2^q: all exact */
        vr_tz = 1;
        if (even) vm_tz = mm_shift;
        else vp--; /* the upper end is excluded */
    } else if (q < 63) {
        vr_tz = (mv & ((1ull << q) - 1)) == 0; /* 2^q divides mv; mm and mp have one factor 2 at most */
    }

    int removed = 0, last = 0;
    if (vm_tz || vr_tz) {
        while (vp / 10 > vm / 10) {
            vm_tz &= vm % 10 == 0;
            vr_tz &= last == 0;
            last = (int)(vr % 10);
            vr /= 10, vp /= 10, vm /= 10, removed++;
        }
        if (vm_tz)
            while (vm % 10 == 0) {
                vr_tz &= last == 0;
                last = (int)(vr % 10);
                vr /= 10, vp /= 10, vm /= 10, removed++;
            }
        if (vr_tz && last == 5 && vr % 2 == 0) last = 4; /* exact tie: round half to even */
        *out = vr + ((vr == vm && (!even || !vm_tz)) || last >= 5);
    } else {
        int up = 0;
        while (vp / 10 > vm / 10) {
            up = vr % 10 >= 5;
            vr /= 10, vp /= 10, vm /= 10, removed++;
        }
        *out = vr + (vr == vm || up);
    }
    return e10 + removed;
}

size_t wi_num_repr(double d, char *buf)
{
    char digits[24];
    uint64_t v;
    pthread_once(&pow5_once, pow5_init);
    int e = shortest(d, &v);
    int nd = (int)put_u64(v, digits);
    while (nd > 1 && digits[nd - 1] == '0') nd--, e++;
    return wi_num_format(d < 0, digits, nd, e + nd, buf);
}

size_t wi_num_integral(double d, char *buf)
{
    size_t o = 0;
    double a = fabs(d);
    if (d < 0 && a != 0) buf[o++] = '-';
    if (a < 18446744073709551616.0) return o + put_u64((uint64_t)a, buf + o);

    /* a = m * 2^e with e >= 12: m in base 10^9, doubled 32 bits at a time */
    int e;
    uint64_t m = (uint64_t)ldexp(frexp(a, &e), 53);
    uint32_t limb[40]; /* 10^9 per limb, little-endian; DBL_MAX has 309 digits = 35 limbs */
    size_t nl = 0;
    for (e -= 53; m; m /= 1000000000u) limb[nl++] = (uint32_t)(m % 1000000000u);
    while (e > 0) {
        int s = e < 32 ? e : 32;
        uint64_t carry = 0;
        for (size_t k = 0; k < nl; k++) {
            uint64_t t = ((uint64_t)limb[k] << s) + carry;
            limb[k] = (uint32_t)(t % 1000000000u);
            carry = t / 1000000000u;
        }
        while (carry) limb[nl++] = (uint32_t)(carry % 1000000000u), carry /= 1000000000u;
        e -= s;
    }
    o += put_u64(limb[nl - 1], buf + o);
    for (size_t k = nl - 1; k-- > 0;) {
        uint32_t x = limb[k];
        for (int p = 8; p >= 0; p--, x /= 10) buf[o + (size_t)p] = (char)('0' + x % 10);
        o += 9;
    }
    return o;
}
