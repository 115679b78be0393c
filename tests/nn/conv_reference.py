"""Direct NumPy loops for convolution and pooling: the references the conv, pool and CNN
tests compare with when PyTorch is not installed (and alongside it when it is).

Written from the definitions, one output element at a time, so they share no code
or idea (no im2col, no strided views) with what they check.
"""

from __future__ import annotations

import math

import numpy as np


def _pads(padding, kernel, dilation):
    """``(top, bottom, left, right)`` from an int, a pair, 'valid' or 'same'."""
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return (totals[0] // 2, totals[0] - totals[0] // 2,
                totals[1] // 2, totals[1] - totals[1] // 2)
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (ph, ph, pw, pw)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, w, b=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """out[n, o, i, j] = b[o] + sum over c in o's group, p, q of
    w[o, c, p, q] * xpad[n, c, i*sh + p*dh, j*sw + q*dw]."""
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    top, bottom, left, right = _pads(padding, (kh, kw), (dh, dw))
    xp = np.zeros((n, c, h + top + bottom, wd + left + right))
    xp[:, :, top:top + h, left:left + wd] = x
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for oc in range(o):
        first = (oc // per_group) * cg
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, first:first + cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                           j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, oc, i, j] = np.einsum("ncpq,cpq->n", patch, w[oc])
        if b is not None:
            out[:, oc] += b[oc]
    return out


def _pool_out(n, k, s, p, d, ceil_mode):
    span = n + 2 * p - d * (k - 1) - 1
    o = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    """Max over each window's elements inside the input (padding never wins)."""
    (kh, kw) = _pair(kernel)
    (sh, sw) = _pair(stride if stride else kernel)
    (ph, pw), (dh, dw) = _pair(padding), _pair(dilation)
    n, c, h, w = x.shape
    oh = _pool_out(h, kh, sh, ph, dh, ceil_mode)
    ow = _pool_out(w, kw, sw, pw, dw, ceil_mode)
    out = np.full((n, c, oh, ow), -np.inf)
    for i in range(oh):
        for j in range(ow):
            for p in range(kh):
                for q in range(kw):
                    y, xx = i * sh - ph + p * dh, j * sw - pw + q * dw
                    if 0 <= y < h and 0 <= xx < w:
                        out[:, :, i, j] = np.maximum(out[:, :, i, j], x[:, :, y, xx])
    return out


def avg_pool2d(x, kernel, stride=None, padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    """PyTorch's rule: the divisor counts the window clipped to the padded input (or, with
    ``count_include_pad=False``, to the input itself)."""
    (kh, kw) = _pair(kernel)
    (sh, sw) = _pair(stride if stride else kernel)
    (ph, pw) = _pair(padding)
    n, c, h, w = x.shape
    oh = _pool_out(h, kh, sh, ph, 1, ceil_mode)
    ow = _pool_out(w, kw, sw, pw, 1, ceil_mode)
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, x0 = i * sh - ph, j * sw - pw
            y1, x1 = min(y0 + kh, h + ph), min(x0 + kw, w + pw)
            size = (y1 - y0) * (x1 - x0)
            y0, x0, y1, x1 = max(y0, 0), max(x0, 0), min(y1, h), min(x1, w)
            if not count_include_pad:
                size = (y1 - y0) * (x1 - x0)
            total = x[:, :, y0:y1, x0:x1].sum(axis=(2, 3))
            out[:, :, i, j] = total / (divisor_override or size)
    return out


def adaptive_avg_pool2d(x, output_size):
    oh, ow = _pair(output_size)
    n, c, h, w = x.shape
    out = np.zeros((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            y0, y1 = (i * h) // oh, -(-((i + 1) * h) // oh)
            x0, x1 = (j * w) // ow, -(-((j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, y0:y1, x0:x1].mean(axis=(2, 3))
    return out
