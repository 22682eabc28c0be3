"""The polynomial coefficients of triton_helpers.erf32 and tanh32, fitted here. Not a test; CPU only.

    python -m benchmarks erf_fit

Each polynomial is fitted by least squares on 4,000 Chebyshev points of its range, reweighted toward
the largest error for 30 rounds (near-minimax), then rounded to float32; the error of the whole
function is then measured in float32 arithmetic (numpy, no FMA) against float64, in ulps:

    erf, |x| < 1:       erf(x) = x + x * P(x^2)                    P of degree 6
    erf, 1 <= |x|:      erf(x) = 1 - 2^(-b * (1 + Q(b)))           Q of degree 6, b = min(|x|, 3.92); fitted
                                                                   on -log2(erfc(b)) / b - 1, weighted by
                                                                   erfc(b) * b * ln 2 (its effect on erf)
    tanh, |x| < 0.625:  tanh(x) = x + x^3 * R(x^2)                 R of degree 4
    tanh, else:         tanh(x) = 1 - 2 / (e^(2|x|) + 1)           (no fit)
"""
from __future__ import annotations

import argparse
import math

import numpy as np

ERF_SPLIT, ERF_CLAMP, TANH_SPLIT = 1.0, 3.92, 0.625


def fit(f, lo: float, hi: float, degree: int, weight=None, rounds: int = 30) -> np.ndarray:
    """Coefficients, highest power first, of a near-minimax polynomial for f on [lo, hi]."""
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.linspace(0, np.pi, 4000))
    y = np.array([f(v) for v in x])
    w = np.ones_like(x) if weight is None else np.array([weight(v) for v in x])
    basis = np.vander(x, degree + 1)
    extra = np.ones_like(x)
    for _ in range(rounds):
        coef, *_ = np.linalg.lstsq(basis * (w * extra)[:, None], y * w * extra, rcond=None)
        err = np.abs(basis @ coef - y) * w
        extra = extra * (err / err.max()) ** 0.5 + 1e-3
        extra /= extra.max()
    return coef


def _horner(coef: np.ndarray, t: np.ndarray) -> np.ndarray:
    r = np.full_like(t, coef[0])
    for c in coef[1:]:
        r = (r * t + c).astype(np.float32)
    return r


def _ulps(got: np.ndarray, ref: np.ndarray) -> float:
    ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
    return float((np.abs(got.astype(np.float64) - ref) / np.maximum(ulp, 1e-45)).max())


def main(argv=None) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    small = lambda u: math.erf(math.sqrt(u)) / math.sqrt(u) - 1 if u > 0 else 2 / math.sqrt(math.pi) - 1  # noqa: E731
    large = lambda b: -math.log2(math.erfc(b)) / b - 1  # noqa: E731
    p = np.float32(fit(small, 0.0, ERF_SPLIT ** 2, 6))
    q = np.float32(fit(large, ERF_SPLIT, ERF_CLAMP, 6, weight=lambda b: math.erfc(b) * b * math.log(2)))
    x = np.linspace(0, 4.5, 400_001).astype(np.float32)
    b = np.minimum(x, np.float32(ERF_CLAMP))
    near = (x + x * _horner(p, (x * x).astype(np.float32))).astype(np.float32)
    far = (np.float32(1) - np.exp2(-(b * _horner(q, b) + b).astype(np.float64)).astype(np.float32)).astype(np.float32)
    erf = np.where(x < ERF_SPLIT, near, far)
    print("erf32 P:", [float(c) for c in p])
    print("erf32 Q:", [float(c) for c in q])
    print(f"erf32: max {_ulps(erf, np.array([math.erf(float(v)) for v in x])):.2f} ulp on [0, 4.5]")

    tsmall = lambda u: (math.tanh(math.sqrt(u)) / math.sqrt(u) - 1) / u if u > 0 else -1 / 3  # noqa: E731
    r = np.float32(fit(tsmall, 0.0, TANH_SPLIT ** 2, 4))
    x = np.linspace(0, 5, 400_001).astype(np.float32)
    t = (x * x).astype(np.float32)
    near = ((x * t).astype(np.float32) * _horner(r, t) + x).astype(np.float32)
    e2 = np.exp2((x * np.float32(2 / math.log(2))).astype(np.float64)).astype(np.float32)
    far = (np.float32(1) - np.float32(2) / (e2 + np.float32(1))).astype(np.float32)
    tanh = np.where(x < TANH_SPLIT, near, far)
    print("tanh32 R:", [float(c) for c in r])
    print(f"tanh32: max {_ulps(tanh, np.tanh(x.astype(np.float64))):.2f} ulp on [0, 5]")


if __name__ == "__main__":
    main()
