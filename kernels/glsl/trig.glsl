// sin and cos in f32 to within about an ulp, identically on every device (Vulkan bounds the
// built-ins only loosely): Cody-Waite reduction by pi/2 in three parts, then Cephes
// polynomials. Shared by posenc (Kimodo's positional encoding) and root_bridge. Include after
// common.glsl (two_prod).

// sin(x) and cos(x) for |x| <= pi/4 (a little beyond after rounding n): Cephes sinf.c/cosf.c.
float sin_poly(float x) {
    float z = x * x;
    float y = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z;
    return y * x + x;
}

float cos_poly(float x) {
    float z = x * x;
    float y = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z;
    return (y * z - 0.5 * z) + 1.0;
}

// pi/2 = P1 + P2 + P3 to about 2^-75 (each the f32 nearest the remainder).
#define P1 uintBitsToFloat(0x3fc90fdbu)
#define P2 uintBitsToFloat(0xb33bbd2eu)
#define P3 uintBitsToFloat(0xa6f72cedu)
#define TWO_OVER_PI uintBitsToFloat(0x3f22f983u)

// a - n pi/2 for a whole n with |n| < 2^24 and a within a few multiples of pi/2 of n pi/2.
// a - n P1 is exact (n P1 = h + e exactly, and a - h by Sterbenz's lemma), so the result is
// rounded only in the small terms and once at the end.
float reduce(float a, float n) {
    float h;
    float e;
    two_prod(n, P1, h, e);
    precise float t = a - h;
    precise float small = (e + n * P2) + n * P3;
    precise float r = t - small;
    return r;
}

// sin(a) (quarter = 0) or cos(a) = sin(a + pi/2) (quarter = 1) for |a| < 2^24.
float sin_quarter(float a, uint quarter) {
    // The nearest multiple of pi/2, within 2 of it: a 2/pi is rounded twice and 2/pi itself
    // once, which matters once a exceeds a million; the second step corrects n.
    float n = floor(a * TWO_OVER_PI + 0.5);
    float r = reduce(a, n);
    float m = floor(r * TWO_OVER_PI + 0.5);
    if (m != 0.0) {
        n += m;
        r = reduce(a, n);
    }
    // n + 4 has the same residue mod 4 as n and is never negative here.
    uint q = uint(int(n) + 4) + quarter;
    float v = (q & 1u) != 0u ? cos_poly(r) : sin_poly(r);
    return (q & 2u) != 0u ? -v : v;
}
