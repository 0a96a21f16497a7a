#!/usr/bin/env python3
"""Fit the polynomial coefficients of kernels/glsl/common.glsl (exp_f32, erf_small, erfc_g)
and report the f32 error of the resulting functions in ulp, by emulating the shader arithmetic
in numpy float32 against mpmath at 40 digits.

Each fit minimises the maximum relative error (Lawson's iteratively reweighted least squares
on Chebyshev nodes). Usage: python3 tools/fit_math.py (needs numpy and mpmath).
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40
f32 = np.float32


def fit(f, lo, hi, deg, n=2000, iters=30):
    """Near-minimax relative-error polynomial of degree `deg` for f on [lo, hi]."""
    k = np.arange(n)
    s = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)
    y = np.array([float(f(mp.mpf(v))) for v in s])
    v = np.vander(s, deg + 1, increasing=True)
    w = np.ones(n) / n
    for _ in range(iters):
        a = v / y[:, None] * np.sqrt(w)[:, None]
        c, *_ = np.linalg.lstsq(a, np.sqrt(w), rcond=None)
        e = np.abs(v @ c / y - 1)
        w = w * e
        w /= w.sum()
    return [f32(x) for x in c], float(np.max(np.abs(v @ c / y - 1)))


def erf_over_x_minus_1(s):  # erf(x)/x - 1 with s = x^2
    return mp.erf(mp.sqrt(s)) / mp.sqrt(s) - 1 if s > 0 else 2 / mp.sqrt(mp.pi) - 1


def g_of_u(u):  # G(u) = x exp(x^2) erfc(x) with u = 1/x^2
    return mp.sqrt(1 / u) * mp.exp(1 / u) * mp.erfc(mp.sqrt(1 / u)) if u > 0 else 1 / mp.sqrt(mp.pi)


def exp_q(r):  # (exp(r) - 1 - r) / r^2
    return (mp.exp(r) - 1 - r) / r**2 if r != 0 else mp.mpf(0.5)


def horner(c, s):
    r = c[-1]
    for v in reversed(c[:-1]):
        r = f32(f32(r * s) + v)
    return r


def main():
    c_erf, e1 = fit(erf_over_x_minus_1, 0, 1, 6)
    c_ga, e2 = fit(g_of_u, 0.25, 1, 8)
    c_gb, e3 = fit(g_of_u, 0, 0.25, 8)
    c_exp, e4 = fit(exp_q, -0.3466, 0.3466, 5)
    for name, c, e in (("erf_small", c_erf, e1), ("erfc_g x<2", c_ga, e2),
                       ("erfc_g x>=2", c_gb, e3), ("exp_f32 Q", c_exp, e4)):
        print(f"{name}: max relative fit error {e:.2e}")
        print("  " + ", ".join(f"{float(v):.9e}" for v in c))

    def kexp(x):
        x = f32(x)
        if x > f32(88.7228394):
            return f32(np.inf)
        if x < f32(-103.972084):
            return f32(0)
        n = f32(np.floor(f32(x * f32(1.44269502)) + f32(0.5)))
        r = f32(f32(x - f32(n * f32(0.693145752))) - f32(n * f32(1.42860682e-6)))
        return f32(np.ldexp(f32(f32(1) + f32(r + f32(f32(r * r) * horner(c_exp, r)))), int(n)))

    def split_hi(x):
        return (np.array([x], dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)[0]

    def exp_neg_sq(x, s):
        hi = split_hi(x)
        return f32(kexp(f32(-s * f32(hi * hi))) * kexp(f32(-s * f32(f32(x - hi) * f32(x + hi)))))

    def erfc_g(x, u):
        return horner(c_ga, u) if x < 2 else horner(c_gb, u)

    def erf_small(x):
        return f32(x + f32(x * horner(c_erf, f32(x * x))))

    def erfc_large(x):
        return f32(f32(exp_neg_sq(x, f32(1)) * erfc_g(x, f32(f32(1) / f32(x * x)))) / x)

    def gelu(x):
        a = abs(x)
        if a < f32(1.41421356):
            phi = f32(f32(1) + erf_small(f32(x * f32(0.707106781))))
        else:
            t = f32(f32(exp_neg_sq(a, f32(0.5)) * erfc_g(f32(a * f32(0.707106781)), f32(f32(2) / f32(a * a))))
                    * f32(f32(1.41421356) / a))
            phi = t if x < 0 else f32(f32(2) - t)
        return f32(f32(f32(0.5) * x) * phi)

    def ulp(v):
        return float(np.spacing(np.float32(abs(v))))

    rng = np.random.default_rng(1)
    cases = [
        ("exp_f32", kexp, mp.exp, rng.uniform(-100, 88, 3000)),
        ("erf_small", erf_small, mp.erf, rng.uniform(-1, 1, 3000)),
        ("erfc_large", erfc_large, mp.erfc, rng.uniform(1, 9.9, 3000)),
        ("gelu_erf", gelu, lambda x: x / 2 * (1 + mp.erf(x / mp.sqrt(2))), rng.uniform(-12.5, 12.5, 4000)),
    ]
    for name, fn, ref, xs in cases:
        worst = max(abs(float(fn(x)) - float(ref(mp.mpf(float(x))))) / ulp(float(ref(mp.mpf(float(x)))))
                    for x in xs.astype(np.float32))
        print(f"{name}: max error {worst:.2f} ulp")


if __name__ == "__main__":
    main()
