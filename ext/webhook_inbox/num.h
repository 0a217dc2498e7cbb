/* num.h - doubles printed the way Python prints them: repr's shortest round-trip digits
 * and exact integers, in time proportional to the digits printed. Pure C, no allocation. */
#ifndef WI_NUM_H
#define WI_NUM_H

#include <stddef.h>

#define WI_NUM_REPR_MAX 32     /* "-2.2250738585072014e-308" and the like, with room */
#define WI_NUM_INTEGRAL_MAX 320 /* "-" and the 309 digits of DBL_MAX */

/* Writes Python's repr(d) for a finite double d that is not an integer (the shortest digits
 * that read back as d, the nearest of them when several are shortest; fixed notation when
 * the decimal point falls within -4 < decpt <= 16, else d.ddde[+-]XX) into buf, which
 * holds WI_NUM_REPR_MAX bytes. Returns the length; no NUL is written. */
size_t wi_num_repr(double d, char *buf);

/* Writes the exact decimal value of a finite double d with an integral value (every digit,
 * like Python's int(d); -0.0 is "0") into buf, which holds WI_NUM_INTEGRAL_MAX bytes.
 * Returns the length; no NUL is written. */
size_t wi_num_integral(double d, char *buf);

/* Formats a decimal given by its significant digits (nd >= 1, no leading or trailing
 * zeros) and decimal point position decpt (value = 0.d1d2... * 10^decpt) the way repr
 * does, with any zeros an integral value needs. buf holds WI_NUM_REPR_MAX bytes when
 * nd <= 17 and -330 < decpt <= 17. Returns the length. */
size_t wi_num_format(int neg, const char *digits, int nd, int decpt, char *buf);

#endif
