"""The NN ops against plain numpy references written here (naive loops, small
shapes), against ``torch.nn.functional`` when torch is installed, and their
call-time errors and run-time failures."""

from __future__ import annotations

import asyncio
import itertools
import math
from typing import Any

import numpy as np
import pytest

import eagerrt as ert
from eagerrt.backends.cpu import attention as cpu_attention
from eagerrt.backends.cpu import conv as cpu_conv
from eagerrt.backends.cpu import linear as cpu_linear
from eagerrt.backends.cpu import norm as cpu_norm
from eagerrt.backends.cpu import threads as cpu_threads
from eagerrt.ops.nn import conv as nn_conv

RNG = np.random.default_rng(1234)


def rand(*shape: int, dtype: Any = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def close(got: Any, want: Any, dtype: Any = np.float32, scale: float = 1.0) -> None:
    got = got.numpy() if isinstance(got, ert.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    tol = (2e-5 if np.dtype(dtype) == np.float32 else 1e-12) * scale
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def torch_f() -> Any:
    torch = pytest.importorskip("torch")
    return torch, torch.nn.functional


# -- references ---------------------------------------------------------------------------
def ref_conv2d(x, w, b, stride, pads, dilation, groups):  # type: ignore[no-untyped-def]
    """Tap by tap: each (i, j) of the kernel multiplies a strided slice of the
    padded input (a different algorithm from the kernel's im2col)."""
    (sh, sw), (dh, dw) = stride, dilation
    top, bottom, left, right = pads
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, h, wd = xp.shape
    o, cg, kh, kw = w.shape
    ho = (h - dh * (kh - 1) - 1) // sh + 1
    wo = (wd - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo))
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        patch = xp[
            :,
            g * cg : (g + 1) * cg,
            i * dh : i * dh + sh * (ho - 1) + 1 : sh,
            j * dw : j * dw + sw * (wo - 1) + 1 : sw,
        ]
        out[:, g * og : (g + 1) * og] += np.einsum(
            "ncyx,oc->noyx", patch, w[g * og : (g + 1) * og, :, i, j]
        )
    if b is not None:
        out += b[:, None, None]
    return out


def ref_conv_transpose2d(x, w, b, stride, padding, output_padding, groups, dilation):  # type: ignore[no-untyped-def]
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = stride, padding, output_padding, dilation
    n, cin, h, wd = x.shape
    _, og, kh, kw = w.shape
    cg = cin // groups
    full_h = (h - 1) * sh + dh * (kh - 1) + oph + 1
    full_w = (wd - 1) * sw + dw * (kw - 1) + opw + 1
    full = np.zeros((n, og * groups, full_h, full_w))
    for g, i, j in itertools.product(range(groups), range(kh), range(kw)):
        contrib = np.einsum(
            "ncyx,co->noyx", x[:, g * cg : (g + 1) * cg], w[g * cg : (g + 1) * cg, :, i, j]
        )
        full[
            :,
            g * og : (g + 1) * og,
            i * dh : i * dh + sh * (h - 1) + 1 : sh,
            j * dw : j * dw + sw * (wd - 1) + 1 : sw,
        ] += contrib
    out = full[:, :, ph : full_h - ph, pw : full_w - pw]
    if b is not None:
        out = out + b[:, None, None]
    return out


def pool_out(size: int, k: int, s: int, p: int, d: int, ceil: bool) -> int:
    eff = d * (k - 1) + 1
    out = (math.ceil if ceil else math.floor)((size + 2 * p - eff) / s) + 1
    if ceil and (out - 1) * s >= size + p:
        out -= 1
    return out


def ref_max_pool2d(x, k, s, p, d, ceil):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape
    ho, wo = pool_out(h, k, s, p, d, ceil), pool_out(w, k, s, p, d, ceil)
    out = np.empty((n, c, ho, wo), x.dtype)
    for y, z in itertools.product(range(ho), range(wo)):
        rows = [y * s - p + i * d for i in range(k) if 0 <= y * s - p + i * d < h]
        cols = [z * s - p + j * d for j in range(k) if 0 <= z * s - p + j * d < w]
        out[:, :, y, z] = x[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return out


def ref_avg_pool2d(x, k, s, p, ceil, include_pad, divisor):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape
    ho, wo = pool_out(h, k, s, p, 1, ceil), pool_out(w, k, s, p, 1, ceil)
    out = np.empty((n, c, ho, wo))
    for y, z in itertools.product(range(ho), range(wo)):
        y0, x0 = y * s - p, z * s - p
        y1, x1 = min(y0 + k, h + p), min(x0 + k, w + p)
        window = x[:, :, max(y0, 0) : min(y1, h), max(x0, 0) : min(x1, w)].astype(np.float64)
        if divisor:
            count = divisor
        elif include_pad:
            count = (y1 - y0) * (x1 - x0)
        else:
            count = window.shape[2] * window.shape[3]
        out[:, :, y, z] = window.sum(axis=(2, 3)) / count
    return out


def ref_adaptive_avg(x, oh, ow):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape
    out = np.empty((n, c, oh, ow))
    for y, z in itertools.product(range(oh), range(ow)):
        y0, y1 = math.floor(y * h / oh), math.ceil((y + 1) * h / oh)
        x0, x1 = math.floor(z * w / ow), math.ceil((z + 1) * w / ow)
        out[:, :, y, z] = x[:, :, y0:y1, x0:x1].astype(np.float64).mean(axis=(2, 3))
    return out


def ref_softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def ref_attention(q, k, v, mask=None, causal=False, scale=None):  # type: ignore[no-untyped-def]
    q, k, v = (a.astype(np.float64) for a in (q, k, v))
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    L, S = s.shape[-2:]
    if causal:
        mask = np.tril(np.ones((L, S), bool))
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    with np.errstate(invalid="ignore"):
        p = ref_softmax(s)
    p = np.nan_to_num(p, nan=0.0)  # rows with nothing to attend to: zeros, as PyTorch
    return p @ v


def ref_pad(x, pads, mode, value=0.0):  # type: ignore[no-untyped-def]
    """Index arithmetic per axis: where each output position reads from."""
    out = x
    for i in range(len(pads) // 2):
        axis = x.ndim - 1 - i
        before, after = pads[2 * i], pads[2 * i + 1]
        size = out.shape[axis]
        pos = np.arange(-before, size + after)
        if mode == "reflect":
            period = 2 * (size - 1)
            src = np.abs(pos) % period if period else np.zeros_like(pos)
            src = np.where(src >= size, period - src, src)
        elif mode == "replicate":
            src = np.clip(pos, 0, size - 1)
        elif mode == "circular":
            src = pos % size
        else:
            src = np.clip(pos, 0, max(size - 1, 0))
        taken = np.take(out, src, axis=axis)
        if mode == "constant":
            outside = (pos < 0) | (pos >= size)
            shape = [1] * out.ndim
            shape[axis] = len(pos)
            taken = np.where(outside.reshape(shape), value, taken)
        out = taken
    return out


def ref_interpolate(x, oh, ow, mode, align, scales):  # type: ignore[no-untyped-def]
    n, c, h, w = x.shape

    def nearest(o: int, size: int, n_out: int, sc: float | None) -> int:
        f = np.float32(size / n_out if sc is None else 1 / sc)
        pos = np.float32(o) + (np.float32(0.5) if mode == "nearest-exact" else 0)
        return min(int(np.floor(pos * f)), size - 1)

    def linear(o: int, size: int, n_out: int, sc: float | None) -> tuple[int, int, float]:
        if align:
            src = o * (size - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            f = size / n_out if sc is None else 1 / sc
            src = max((o + 0.5) * f - 0.5, 0.0)
        i0 = min(math.floor(src), size - 1)
        return i0, min(i0 + 1, size - 1), src - i0

    out = np.empty((n, c, oh, ow))
    for y, z in itertools.product(range(oh), range(ow)):
        if mode == "bilinear":
            a0, a1, ly = linear(y, h, oh, scales[0])
            b0, b1, lx = linear(z, w, ow, scales[1])
            out[:, :, y, z] = (
                x[:, :, a0, b0] * (1 - ly) * (1 - lx)
                + x[:, :, a0, b1] * (1 - ly) * lx
                + x[:, :, a1, b0] * ly * (1 - lx)
                + x[:, :, a1, b1] * ly * lx
            )
        else:
            out[:, :, y, z] = x[:, :, nearest(y, h, oh, scales[0]), nearest(z, w, ow, scales[1])]
    return out


def ref_cross_entropy(x, t, weight, ignore, reduction, ls):  # type: ignore[no-untyped-def]
    """Class indices, loops over samples; logits (N, C, d...)."""
    x = np.moveaxis(x.astype(np.float64), 1, -1).reshape(-1, x.shape[1])
    t = t.reshape(-1)
    c = x.shape[1]
    w = np.ones(c) if weight is None else weight.astype(np.float64)
    losses, denom = [], 0.0
    for row, target in zip(x, t, strict=True):
        logp = row - row.max() - math.log(np.exp(row - row.max()).sum())
        if target == ignore:
            losses.append(0.0)
            continue
        nll = -w[target] * logp[target]
        smooth = -(w * logp).sum()
        losses.append((1 - ls) * nll + ls / c * smooth)
        denom += w[target]
    arr = np.array(losses)
    if reduction == "none":
        return arr
    if reduction == "sum":
        return arr.sum()
    return arr.sum() / denom


# -- conv2d ------------------------------------------------------------------------------------
CONV_CASES = [
    # (N, C, H, W), (O, C/groups, kH, kW), stride, padding, dilation, groups, bias
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1, True),
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 1, 1, 1, False),
    ((1, 4, 9, 8), (6, 2, 3, 2), (2, 1), (1, 2), 1, 2, True),
    ((2, 4, 11, 10), (4, 1, 3, 3), 2, 1, 2, 4, True),
    ((1, 2, 8, 9), (3, 2, 1, 1), 1, 0, 1, 1, True),
    ((1, 2, 8, 9), (3, 2, 1, 1), 2, 1, 1, 1, False),
    ((1, 3, 6, 7), (2, 3, 4, 2), 1, "same", (2, 1), 1, True),
    ((1, 3, 6, 7), (2, 3, 5, 3), 3, "valid", 1, 1, False),
    ((3, 5, 5), (2, 3, 2, 2), 1, 1, 1, 1, True),  # unbatched
]


def _conv_pads(padding: Any, k: tuple[int, int], d: tuple[int, int]) -> tuple[int, ...]:
    if padding == "valid":
        return (0, 0, 0, 0)
    if padding == "same":
        th, tw = d[0] * (k[0] - 1), d[1] * (k[1] - 1)
        return (th // 2, th - th // 2, tw // 2, tw - tw // 2)
    ph, pw = (padding, padding) if isinstance(padding, int) else padding
    return (ph, ph, pw, pw)


def _pair(v: Any) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)  # type: ignore[return-value]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CONV_CASES, ids=str)
def test_conv2d_matches_reference(case: Any, dtype: Any) -> None:
    xs, ws, stride, padding, dilation, groups, has_bias = case
    x, w = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype)
    b = rand(ws[0], dtype=dtype) if has_bias else None
    got = ert.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    x4 = x if x.ndim == 4 else x[None]
    pads = _conv_pads(padding, ws[2:], _pair(dilation))
    want = ref_conv2d(x4, w, b, _pair(stride), pads, _pair(dilation), groups)
    want = want if x.ndim == 4 else want[0]
    assert got.shape == want.shape and got.dtype == dtype
    close(got, want, dtype, scale=5)


def test_conv2d_large_blocks_and_workers() -> None:
    # Enough output rows for several im2col blocks, offloaded to a worker.
    x, w, b = rand(2, 16, 40, 33), rand(8, 16, 3, 3), rand(8)
    with ert.config.override(inline_threshold_ns=0):
        got = asyncio.run(_await(ert.conv2d(x, w, b, padding=1, stride=(1, 2))))
    close(got, ref_conv2d(x, w, b, (1, 2), (1, 1, 1, 1), (1, 1), 1), scale=10)


@pytest.mark.parametrize(
    "xs, ws",
    [
        ((3, 64, 10, 9), (64, 64, 3, 3)),  # blocks of whole images on two threads
        ((2, 128, 5, 4), (64, 128, 3, 3)),  # one block: its product split by channels
    ],
)
def test_conv2d_product_strategies(
    xs: tuple[int, ...], ws: tuple[int, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_CHANNELS", 10**9)  # im2col for these
    x, w, b = rand(*xs), rand(*ws) * 0.1, rand(ws[0])
    got = ert.conv2d(x, w, b, padding=1)
    close(got, ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1), scale=20)


@pytest.mark.parametrize(
    "hw, kernel, stride, padding, dilation, rows",
    [
        ((4, 4), (3, 3), (1, 1), 1, (1, 1), (0, 4)),  # narrow: through a padded copy
        ((5, 7), (2, 3), (1, 1), "same", (2, 1), (1, 4)),  # bottom padding wider
        ((9, 8), (3, 3), (2, 2), 1, (1, 1), (0, 5)),
        ((6, 13), (3, 3), (1, 1), 1, (1, 1), (2, 5)),  # wide: straight from the image
        ((12, 40), (3, 2), (1, 3), (2, 1), (2, 2), (0, 12)),
        ((3, 20), (5, 5), (1, 1), "same", (1, 1), (0, 3)),  # taps far outside
    ],
)
def test_im2col_matches_padded_windows(
    hw: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: Any,
    dilation: tuple[int, int],
    rows: tuple[int, int],
) -> None:
    # Both ways of gathering (narrow outputs through a padded copy, wide ones
    # straight from the image) against windows of np.pad, for a band of output
    # rows of channels [1, 4), written at a column offset.
    from eagerrt.backends.cpu.numba_nn import _PADDED_WIDTH, im2col

    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    x = rand(5, *hw)
    g = nn_conv.conv_geometry(x, rand(2, 5, kh, kw), None, stride, padding, dilation, 1)
    top, bottom, left, right = nn_conv.conv_padding(padding, kernel, dilation, stride)
    xp = np.pad(x, ((0, 0), (top, bottom), (left, right)))
    oh0, oh1 = rows
    want = np.stack(
        [
            xp[c, i * dh + sh * oh0 : i * dh + sh * (oh1 - 1) + 1 : sh][
                :, j * dw : j * dw + sw * (g.wo - 1) + 1 : sw
            ].reshape(-1)
            for c in range(1, 4)
            for i in range(kh)
            for j in range(kw)
        ]
    )
    cols = np.full((want.shape[0], want.shape[1] + 3), np.nan, np.float32)
    im2col(x, cols, 3, 1, 4, kh, kw, sh, sw, g.ph, g.pw, dh, dw, oh0, oh1, g.wo)
    np.testing.assert_array_equal(cols[:, 3:], want)
    assert np.isnan(cols[:, :3]).all()  # columns before the offset untouched
    assert (g.wo <= _PADDED_WIDTH) == (hw[1] <= 9)  # both ways are covered


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("blocks", ["rows", "images", "one"])
@pytest.mark.parametrize(
    "xs, ws, stride, groups",
    [
        ((3, 6, 9, 8), (8, 6, 3, 3), 2, 1),
        ((1, 6, 9, 8), (8, 3, 3, 3), 2, 2),  # one image: one product a group
        ((4, 8, 5, 7), (6, 4, 3, 1), (2, 1), 2),
        ((1, 5, 6, 6), (4, 5, 3, 3), 1, 1),  # stride 1, one image
    ],
)
def test_conv2d_gathered_blocks_and_threads(
    xs: tuple[int, ...],
    ws: tuple[int, ...],
    stride: Any,
    groups: int,
    blocks: str,
    threads: int,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # im2col by gathering, cut into blocks of a few rows, of whole images, or one
    # block, shared by two threads however small (or not, on one thread).
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_CHANNELS", 10**9)
    monkeypatch.setattr(cpu_conv, "_SPLIT_FLOPS", 0)
    monkeypatch.setattr(cpu_threads, "_MIN_CHUNK_ROWS", 1)
    x, w, b = rand(*xs), rand(*ws), rand(ws[0])
    geo = nn_conv.conv_geometry(x, w, b, stride, 1, 1, groups)
    image = 4 * ws[1] * ws[2] * ws[3] * geo.ho * geo.wo  # an image's im2col bytes
    budget = {"rows": image // geo.ho * 2, "images": image, "one": 1 << 30}[blocks]
    monkeypatch.setattr(cpu_conv, "_IM2COL_BYTES", budget)
    pooled = spy(monkeypatch, "on_blas_threads")
    with ert.config.override(num_threads=threads):
        got = ert.conv2d(x, w, b, stride=stride, padding=1, groups=groups).numpy()
    want = ref_conv2d(x, w, b, _pair(stride), (1, 1, 1, 1), (1, 1), groups)
    close(got, want, scale=5)
    # One image's blocks run on this thread, their products on BLAS's own
    # threads; a batch's blocks, or its one block of several images, are split
    # with the helper thread (mixing the two left BLAS's threads spinning
    # beside the splits).
    assert len(pooled) == (threads == 2 and xs[0] == 1)


def spy(monkeypatch: pytest.MonkeyPatch, name: str) -> list[Any]:
    """Calls of the CPU backend's ``threads.<name>`` (the work each was given),
    still made."""
    calls: list[Any] = []
    real = getattr(cpu_threads, name)

    def recording(work: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(work)
        return real(work, *args, **kwargs)

    monkeypatch.setattr(cpu_threads, name, recording)
    return calls


WINOGRAD_CASES = [
    # (N, C, H, W), O, padding, groups
    ((2, 4, 7, 9), 5, 1, 1),  # odd sizes: partial tiles at the border
    ((1, 6, 8, 6), 3, 0, 1),
    ((3, 4, 5, 6), 4, (1, 0), 1),
    ((2, 5, 1, 1), 4, 1, 1),  # a single pixel
    ((1, 4, 2, 3), 2, (2, 3), 1),  # padding wider than the image
    ((2, 8, 6, 5), 6, "same", 2),
    ((1, 12, 9, 4), 9, 1, 3),
    ((4, 7, 7), 3, 1, 1),  # unbatched
]


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("span", ["compact", "gapped"])
@pytest.mark.parametrize("block", ["tiny", "rows", "images"])
@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=str)
def test_conv2d_winograd(
    case: Any, block: str, span: str, dtype: Any, bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Small shapes forced onto the Winograd path, with blocks of one tile row,
    # of a few rows of an image, and of several whole images; tile rows stored
    # without or with the dropped column.
    xs, o, padding, groups = case
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_TILES", 1)
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_COMPACT_TILES", 10**9 if span == "compact" else 0)
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_BYTES", 0)
    monkeypatch.setattr(
        cpu_conv, "_WINOGRAD_MIN_COLS", {"tiny": 1, "rows": 13, "images": 100}[block]
    )
    x, w = rand(*xs, dtype=dtype), rand(o * groups, xs[-3] // groups, 3, 3, dtype=dtype)
    b = rand(o * groups, dtype=dtype) if bias else None
    x4 = x if x.ndim == 4 else x[None]
    geo = nn_conv.conv_geometry(x, w, b, 1, padding, 1, groups)
    assert cpu_conv._winograd_fits(geo)
    got = ert.conv2d(x, w, b, padding=padding, groups=groups)
    want = ref_conv2d(x4, w, b, (1, 1), _conv_pads(padding, (3, 3), (1, 1)), (1, 1), groups)
    close(got, want if x.ndim == 4 else want[0], dtype, scale=5)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("block_cols", [1, 10**6])  # a tile row a block, or whole images
@pytest.mark.parametrize("xs", [(1, 8, 7, 10), (3, 6, 4, 4)])
def test_conv2d_winograd_one_image_or_blocks_shared(
    xs: tuple[int, ...], block_cols: int, bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two threads: one image's blocks of tiles are transformed here, their
    # products left to BLAS's threads; a batch's are shared with the helper thread.
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_TILES", 1)
    monkeypatch.setattr(cpu_conv, "_SPLIT_FLOPS", 0)
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_BYTES", 0)
    monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_COLS", block_cols)
    x, w = rand(*xs), rand(7, xs[1], 3, 3)
    b = rand(7) if bias else None
    pooled = spy(monkeypatch, "on_blas_threads")
    shared = spy(monkeypatch, "shared_by_two")
    with ert.config.override(num_threads=2):
        got = ert.conv2d(x, w, b, padding=1).numpy()
    close(got, ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1), scale=5)
    if xs[0] == 1:
        assert pooled == [cpu_conv._winograd_blocks] and not shared
    else:
        assert shared == [cpu_conv._winograd_blocks] and not pooled


@pytest.mark.parametrize("threads", [1, 2])
def test_conv2d_winograd_real_sizes(threads: int) -> None:
    # The default blocks (rows of 56x56 images over two threads; whole 14x14
    # images), float32 within a few roundings of the float64 reference.
    for xs, o in (((3, 64, 56, 56), 64), ((4, 32, 14, 13), 48)):
        x, w, b = rand(*xs), rand(o, xs[1], 3, 3) * 0.1, rand(o)
        assert cpu_conv._winograd_fits(nn_conv.conv_geometry(x, w, b, 1, 1, 1, 1))
        with ert.config.override(num_threads=threads):
            got = ert.conv2d(x, w, b, padding=1).numpy()
        want = ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


def test_conv2d_winograd_only_where_it_pays() -> None:
    def fits(xs: tuple[int, ...], ws: tuple[int, ...], **kw: Any) -> bool:
        x, w = np.zeros(xs, np.float32), np.zeros(ws, np.float32)
        geo = nn_conv.conv_geometry(x, w, None, kw.get("stride", 1), 1, kw.get("dilation", 1),
                                    kw.get("groups", 1))  # fmt: skip
        return cpu_conv._winograd_fits(geo)

    assert fits((32, 64, 56, 56), (64, 64, 3, 3))
    assert fits((1, 256, 14, 14), (256, 256, 3, 3))
    assert not fits((1, 512, 7, 7), (512, 512, 3, 3))  # too few tiles
    assert not fits((8, 3, 56, 56), (64, 3, 3, 3))  # too few input channels
    assert not fits((8, 32, 56, 56), (32, 1, 3, 3), groups=32)  # depthwise
    assert not fits((8, 64, 56, 56), (64, 64, 3, 3), stride=2)
    assert not fits((8, 64, 56, 56), (64, 64, 3, 3), dilation=2)
    assert not fits((8, 64, 56, 56), (64, 64, 5, 5))


async def _await(t: ert.Tensor) -> np.ndarray:
    return await t


@pytest.mark.filterwarnings("ignore:Using padding='same'")  # PyTorch's note on a copy it makes
@pytest.mark.parametrize("case", CONV_CASES[:7], ids=str)
def test_conv2d_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    xs, ws, stride, padding, dilation, groups, has_bias = case
    x, w = rand(*xs), rand(*ws)
    b = rand(ws[0]) if has_bias else None
    want = F.conv2d(
        torch.from_numpy(x), torch.from_numpy(w), None if b is None else torch.from_numpy(b),
        stride=stride, padding=padding, dilation=dilation, groups=groups,
    )  # fmt: skip
    got = ert.conv2d(x, w, b, stride=stride, padding=padding, dilation=dilation, groups=groups)
    close(got, want.numpy(), scale=5)


# -- conv_transpose2d --------------------------------------------------------------------------
TCONV_CASES = [
    # (N, C_in, H, W), (C_in, C_out/groups, kH, kW), stride, padding, output_padding, groups, dilation
    ((2, 3, 4, 5), (3, 2, 3, 3), 1, 0, 0, 1, 1),
    ((1, 4, 5, 4), (4, 3, 3, 2), 2, 1, 1, 1, 1),
    ((2, 4, 3, 3), (4, 1, 2, 3), (2, 3), (0, 1), (1, 2), 2, 1),
    ((1, 2, 4, 4), (2, 2, 3, 3), 1, 2, 0, 1, 2),
    ((3, 3, 3), (3, 2, 2, 2), 2, 0, 0, 1, 1),  # unbatched
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", TCONV_CASES, ids=str)
def test_conv_transpose2d_matches_reference(case: Any, dtype: Any) -> None:
    xs, ws, stride, padding, outpad, groups, dilation = case
    x, w = rand(*xs, dtype=dtype), rand(*ws, dtype=dtype)
    b = rand(ws[1] * groups, dtype=dtype)
    got = ert.conv_transpose2d(
        x, w, b, stride=stride, padding=padding, output_padding=outpad,
        groups=groups, dilation=dilation,
    )  # fmt: skip
    x4 = x if x.ndim == 4 else x[None]
    want = ref_conv_transpose2d(
        x4, w, b, _pair(stride), _pair(padding), _pair(outpad), groups, _pair(dilation)
    )
    close(got, want if x.ndim == 4 else want[0], dtype, scale=5)


@pytest.mark.parametrize("case", TCONV_CASES[:4], ids=str)
def test_conv_transpose2d_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    xs, ws, stride, padding, outpad, groups, dilation = case
    x, w = rand(*xs), rand(*ws)
    want = F.conv_transpose2d(
        torch.from_numpy(x), torch.from_numpy(w), stride=stride, padding=padding,
        output_padding=outpad, groups=groups, dilation=dilation,
    )  # fmt: skip
    got = ert.conv_transpose2d(
        x, w, stride=stride, padding=padding, output_padding=outpad,
        groups=groups, dilation=dilation,
    )  # fmt: skip
    close(got, want.numpy(), scale=5)


# -- pooling ------------------------------------------------------------------------------------
POOL_CASES = [
    # kernel, stride, padding, dilation, ceil_mode
    (2, None, 0, 1, False),
    (3, 2, 1, 1, False),
    (3, 2, 1, 1, True),
    (2, 3, 1, 2, True),
    (3, 1, 0, 2, False),
]


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_max_pool2d_matches_reference(case: Any) -> None:
    k, s, p, d, ceil = case
    x = rand(2, 3, 9, 8, dtype=np.float64)
    got = ert.max_pool2d(x, k, s, p, d, ceil)
    close(got, ref_max_pool2d(x, k, k if s is None else s, p, d, ceil), np.float64)


@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_avg_pool2d_matches_reference(case: Any, include_pad: bool) -> None:
    k, s, p, _, ceil = case
    x = rand(2, 3, 9, 8)
    got = ert.avg_pool2d(x, k, s, p, ceil_mode=ceil, count_include_pad=include_pad)
    want = ref_avg_pool2d(x, k, k if s is None else s, p, ceil, include_pad, None)
    close(got, want)
    got = ert.avg_pool2d(x, k, s, p, ceil_mode=ceil, divisor_override=5)
    close(got, ref_avg_pool2d(x, k, k if s is None else s, p, ceil, include_pad, 5))


@pytest.mark.parametrize("size", [1, 3, (2, 5), (7, None), (9, 8)])
def test_adaptive_avg_pool2d_matches_reference(size: Any) -> None:
    x = rand(2, 3, 7, 8)
    oh, ow = (size, size) if isinstance(size, int) else (size[0], size[1] or 8)
    close(ert.adaptive_avg_pool2d(x, size), ref_adaptive_avg(x, oh, ow))


def test_max_pool_nan_wins_and_unbatched() -> None:
    x = np.arange(16.0).reshape(1, 4, 4)
    x[0, 0, 1] = np.nan
    got = ert.max_pool2d(x, 2).numpy()
    assert got.shape == (1, 2, 2)
    assert np.isnan(got[0, 0, 0]) and got[0, 1, 1] == 15.0


@pytest.mark.parametrize("case", POOL_CASES, ids=str)
def test_pooling_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    k, s, p, d, ceil = case
    x = rand(2, 3, 9, 8)
    tx = torch.from_numpy(x)
    close(ert.max_pool2d(x, k, s, p, d, ceil), F.max_pool2d(tx, k, s, p, d, ceil).numpy())
    for include in (True, False):
        want = F.avg_pool2d(tx, k, s, p, ceil_mode=ceil, count_include_pad=include)
        close(ert.avg_pool2d(x, k, s, p, ceil, include), want.numpy())
    close(ert.adaptive_avg_pool2d(x, (k + 1, 5)), F.adaptive_avg_pool2d(tx, (k + 1, 5)).numpy())


# -- normalization -----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("affine", [(True, True), (False, False), (True, False), (False, True)])
def test_batch_norm(dtype: Any, affine: tuple[bool, bool]) -> None:
    x = rand(3, 4, 5, 2, dtype=dtype)
    mean, var = rand(4, dtype=dtype), np.abs(rand(4, dtype=dtype)) + 0.5
    w = rand(4, dtype=dtype) if affine[0] else None
    b = rand(4, dtype=dtype) if affine[1] else None
    got = ert.batch_norm(x, mean, var, w, b, eps=1e-3)
    want = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-3)
    if w is not None:
        want = want * w[:, None, None]
    if b is not None:
        want = want + b[:, None, None]
    assert got.dtype == dtype
    close(got, want, dtype, scale=5)
    close(ert.batch_norm(x[:, :, 0, 0], mean, var, w, b, eps=1e-3), want[:, :, 0, 0], dtype, 5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("norm", [(7,), (3, 7), 7])
def test_layer_norm(dtype: Any, norm: Any) -> None:
    x = rand(2, 3, 7, dtype=dtype) * 3 + 1
    shape = (norm,) if isinstance(norm, int) else norm
    axes = tuple(range(-len(shape), 0))
    w, b = rand(*shape, dtype=dtype), rand(*shape, dtype=dtype)
    normed = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + 1e-5)
    close(ert.layer_norm(x, norm), normed, dtype, scale=5)
    close(ert.layer_norm(x, norm, w, b, eps=1e-5), normed * w + b, dtype, scale=5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("norm", "affine"), [((64,), (True, True)), ((4, 16), (False, True))])
def test_compiled_layer_norm_runs_on_the_pool_in_blocks_of_rows(
    dtype: Any, norm: Any, affine: tuple[bool, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Graph mode's layer norm over enough values: one pool kernel over blocks of
    # rows (every row normalized, the last block too), equal to the eager op;
    # strided input and one thread allowed fall back to the eager kernel.
    from eagerrt.backends.cpu import numba_nn as _numba_nn

    pool_or_skip()
    runs: list[int] = []
    real = _numba_nn.normalize_rows_on_pool
    spy = lambda *a: runs.append(len(a[-1]) - 1) or real(*a)  # noqa: E731
    monkeypatch.setattr(_numba_nn, "normalize_rows_on_pool", spy)
    w, b = (ert.asarray(rand(*norm, dtype=dtype)) if on else None for on in affine)
    f = ert.function(lambda x: ert.layer_norm(x * 1.5, norm, w, b, eps=1e-6))
    x = rand(3, 700, 64, dtype=dtype).reshape(3, 700, *norm)
    want = ert.layer_norm(x * 1.5, norm, w, b, eps=1e-6).numpy()
    with ert.config.override(num_threads=2):
        close(f(ert.asarray(x)), want, dtype, scale=5)
        assert runs == [len(_pooled_linear_blocks(2100, 2)) - 1]
        with ert.config.override(num_threads=1):  # changed since the plan was made
            close(f(ert.asarray(x)), want, dtype, scale=5)
    assert len(runs) == 1


def _pooled_linear_blocks(rows: int, threads: int) -> list[int]:
    from eagerrt.backends.cpu import pooled_linear as _pooled_linear

    return _pooled_linear.row_blocks(rows, threads)


@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm(groups: int) -> None:
    x = rand(2, 6, 4, 3, dtype=np.float64)
    w, b = rand(6, dtype=np.float64), rand(6, dtype=np.float64)
    g = x.reshape(2, groups, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(
        x.shape
    )
    close(ert.group_norm(x, groups), normed, np.float64)
    close(ert.group_norm(x, groups, w, b), normed * w[:, None, None] + b[:, None, None], np.float64)


def test_norms_match_torch() -> None:
    torch, F = torch_f()
    x, w, b = rand(3, 6, 5, 4), rand(6), rand(6)
    mean, var = rand(6), np.abs(rand(6)) + 0.1
    t = torch.from_numpy
    close(
        ert.batch_norm(x, mean, var, w, b, eps=1e-4),
        F.batch_norm(t(x), t(mean), t(var), t(w), t(b), eps=1e-4).numpy(),
        scale=5,
    )
    lw, lb = rand(5, 4), rand(5, 4)
    close(
        ert.layer_norm(x, (5, 4), lw, lb), F.layer_norm(t(x), (5, 4), t(lw), t(lb)).numpy(), scale=5
    )
    close(ert.group_norm(x, 3, w, b), F.group_norm(t(x), 3, t(w), t(b)).numpy(), scale=5)


# -- linear, embedding, activations ----------------------------------------------------------------
@pytest.mark.parametrize("xshape", [(5,), (3, 5), (2, 3, 5)])
def test_linear(xshape: tuple[int, ...]) -> None:
    x, w, b = (
        rand(*xshape, dtype=np.float64),
        rand(4, 5, dtype=np.float64),
        rand(4, dtype=np.float64),
    )
    close(ert.linear(x, w), x @ w.T, np.float64)
    close(ert.linear(x, w, b), x @ w.T + b, np.float64)


@pytest.mark.parametrize(
    "rows, split",
    [
        (600, 0),  # rows shared by two threads, in units of _LINEAR_ROWS
        (40, 0),  # too few rows to share: one product
        (600, 10**18),  # not worth sharing: one product
    ],
)
@pytest.mark.parametrize("bias", [False, True])
def test_linear_into_strategies(
    rows: int, split: float, bias: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every way linear_into cuts a product gives x @ w.T + b, with the epilogue
    # seeing every row once, after its product (graph mode's fused linear+gelu).
    monkeypatch.setattr(cpu_linear, "LINEAR_SPLIT_FLOPS", split)
    x, w = rand(2, rows, 48), rand(130, 48)
    b = rand(130) if bias else None
    out = np.empty((2, rows, 130), np.float32)
    seen = np.zeros(2 * rows, int)
    flat = out.reshape(-1, 130)

    def epilogue(start: int, stop: int) -> None:
        seen[start:stop] += 1
        np.maximum(flat[start:stop], 0, out=flat[start:stop])

    cpu_linear.linear_into(x, w, b, out, epilogue)
    want = x @ w.T + (0 if b is None else b)
    close(out, np.maximum(want, 0), scale=5)
    assert (seen == 1).all()


@pytest.mark.parametrize("images", [1, 3])
def test_conv2d_1x1_split_by_channels(images: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 1x1 stride-1 convolution is a product of the input as it is: big ones
    # share their output channels between two threads, or, for one image, are
    # one product a group on BLAS's threads.
    monkeypatch.setattr(cpu_conv, "_SPLIT_FLOPS", 0)
    monkeypatch.setattr(cpu_threads, "_MIN_CHUNK_ROWS", 1)
    x, w, b = rand(images, 12, 7, 5), rand(9, 4, 1, 1), rand(9)
    for threads in (1, 2):
        pooled = spy(monkeypatch, "on_blas_threads")
        with ert.config.override(num_threads=threads):
            got = ert.conv2d(x, w, b, groups=3).numpy()
        close(got, ref_conv2d(x, w, b, (1, 1), (0, 0, 0, 0), (1, 1), 3), scale=5)
        assert len(pooled) == (threads == 2 and images == 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("images", [1, 3])
@pytest.mark.parametrize(
    "path, blocks",
    [
        ("winograd", "rows"),
        ("winograd", "images"),
        ("gathered", "rows"),
        ("gathered", "images"),
        ("gathered", "one"),  # one block of every image, split by channels
        ("plain", "one"),  # 1x1 stride 1: the input is the im2col matrix
    ],
)
def test_conv2d_into_runs_the_epilogue_on_finished_images(
    path: str, blocks: str, images: int, threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Graph mode's out form: the result goes into the given buffer and the
    # epilogue sees each image once, after its last block is written.
    monkeypatch.setattr(cpu_conv, "_SPLIT_FLOPS", 0)
    monkeypatch.setattr(cpu_threads, "_MIN_CHUNK_ROWS", 1)
    k = 1 if path == "plain" else 3
    x, w, b = rand(images, 6, 10, 9), rand(5, 6, k, k), rand(5)
    if path == "winograd":
        monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_TILES", 1)
        monkeypatch.setattr(cpu_conv, "_WINOGRAD_BYTES", 0)
        monkeypatch.setattr(cpu_conv, "_WINOGRAD_MIN_COLS", 5 if blocks == "rows" else 10**6)
    else:
        monkeypatch.setattr(cpu_conv, "_WINOGRAD_CHANNELS", 10**9)
        image = 4 * 6 * k * k * 10 * 9  # an image's im2col bytes
        budget = {"rows": image // 4, "images": image, "one": 1 << 30}[blocks]
        monkeypatch.setattr(cpu_conv, "_IM2COL_BYTES", budget)
    padding = k // 2
    g = nn_conv.conv_geometry(x, w, b, 1, padding, 1, 1)
    assert (path == "winograd") == cpu_conv._winograd_fits(g)
    want = ref_conv2d(x, w, b, (1, 1), (padding,) * 4, (1, 1), 1)
    out = np.full((images, 5, g.ho, g.wo), np.nan, np.float32)
    seen: list[int] = []

    def epilogue(first: int, end: int) -> None:
        close(out[first:end], want[first:end], scale=5)  # already final
        seen.extend(range(first, end))
        out[first:end] *= -1  # the epilogue's own work, in place

    with ert.config.override(num_threads=threads):
        got = cpu_conv._conv2d_run(x, w, b, g, None, out, epilogue)
    assert got is out and sorted(seen) == list(range(images))
    close(out, -want, scale=5)


def test_embedding() -> None:
    table = rand(10, 3)
    idx = np.array([[0, 9, 3], [3, 3, 1]], dtype=np.int32)
    got = ert.embedding(idx, table, padding_idx=0)
    assert got.shape == (2, 3, 3) and got.dtype == np.float32
    np.testing.assert_array_equal(got.numpy(), table[idx])


def test_activations() -> None:
    x = np.concatenate([np.linspace(-40, 40, 41), rand(50, dtype=np.float64) * 5])
    close(ert.silu(x), x / (1 + np.exp(-x)), np.float64)
    for beta, threshold in ((1.0, 20.0), (2.0, 5.0), (0.5, 3.0)):
        with np.errstate(over="ignore"):
            soft = np.log1p(np.exp(beta * x)) / beta
        want = np.where(beta * x > threshold, x, soft)
        close(ert.softplus(x, beta, threshold), want, np.float64)
    erf = np.vectorize(math.erf)
    close(ert.gelu(x), 0.5 * x * (1 + erf(x / math.sqrt(2))), np.float64)
    tanh = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    close(ert.gelu(x, approximate="tanh"), tanh, np.float64)
    x32 = x.astype(np.float32)
    assert ert.silu(x32).dtype == np.float32 and ert.softplus(x32).dtype == np.float32


def test_float32_gelu_is_within_a_rounding_of_the_erf_form_eager_and_compiled() -> None:
    # float32 GELU uses a rational erf (vectorizable); float64 keeps math.erf.
    x = np.concatenate([np.linspace(-12, 12, 100_001), [-1e30, 0.0, -0.0, np.inf, -np.inf]])
    x32 = x.astype(np.float32)
    erf = np.vectorize(math.erf)
    with np.errstate(invalid="ignore"):  # -inf * 0
        want = 0.5 * x32.astype(np.float64) * (1 + erf(x32.astype(np.float64) / math.sqrt(2)))
    eager = ert.gelu(x32).numpy()
    assert eager.dtype == np.float32
    finite = np.isfinite(x32)
    spacing = np.spacing(np.abs(want[finite]).astype(np.float32)).astype(np.float64)
    # Absolute error under 2e-7 * |x| (the erf fit's and float32's roundings in it:
    # 1.6e-7 measured, PyTorch's own float32 GELU 3.1e-7) plus one final rounding.
    error = np.abs(eager[finite] - want[finite])
    assert np.all(error <= 2e-7 * np.abs(x[finite]) + spacing)
    assert eager[-2] == np.inf and np.isnan(eager[-1])  # -inf * Phi(-inf): nan, as torch
    assert eager[-5] == 0 and np.signbit(eager[-5])  # -1e30: -0.0, not -1e30 * a tiny error
    compiled = ert.function(lambda t: ert.gelu(t) * 2.0)(ert.asarray(x32)).numpy()
    np.testing.assert_array_equal(compiled, eager * 2)  # fused code: the same statements


def _counting_row_units(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Rows computed by linear's two-thread path, block by block. The pool's
    kernels (tests/test_pooled_linear.py) are declined, as where there is no
    such pool: this path is their fallback."""
    from eagerrt.backends.cpu import pooled_linear as _pooled_linear

    monkeypatch.setattr(_pooled_linear.PooledLinear, "__call__", lambda self, *a: False)
    seen: list[int] = []
    real = cpu_linear._linear_rows

    def spy(
        x2: Any, wt: Any, bias: Any, out2: Any, epilogue: Any, units: Any, single: bool
    ) -> None:
        def counted() -> Any:
            for unit in units:
                seen.append(unit)
                yield unit

        real(x2, wt, bias, out2, epilogue, counted(), single)

    monkeypatch.setattr(cpu_linear, "_linear_rows", spy)
    return seen


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_large_linear_shares_its_rows_between_two_threads(
    monkeypatch: pytest.MonkeyPatch, contiguous: bool
) -> None:
    seen = _counting_row_units(monkeypatch)
    x, w, b = rand(4, 300, 96), rand(200, 96), rand(200)  # 1200 rows: 5 blocks
    xs = x if contiguous else np.swapaxes(np.swapaxes(x, 0, 1).copy(), 0, 1)
    with ert.config.override(num_threads=2):
        close(ert.linear(xs, w, b), x @ w.T + b, scale=4)
    assert sorted(seen) == [0, 1, 2, 3, 4]


def test_compiled_linear_epilogues_run_on_blocks_of_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _counting_row_units(monkeypatch)
    x, w, b = rand(3, 400, 64), rand(160, 64), rand(160)
    residual, scale = rand(3, 400, 160), rand(1, 1, 160)
    ops = [ert.asarray(a) for a in (w, b, scale)]

    def layer(x: Any, residual: Any) -> Any:  # bias-like, by-rows and scalar operands
        return ert.gelu(ert.linear(x, ops[0], ops[1])) * ops[2] + residual * 0.5

    compiled = ert.function(layer)
    with ert.config.override(num_threads=2):
        want = layer(x, residual).numpy()
        seen.clear()
        got = compiled(ert.asarray(x), ert.asarray(residual)).numpy()
        assert sorted(seen) == [0, 1, 2, 3, 4]
        graph = compiled.compiled_for(ert.asarray(x), ert.asarray(residual)).graph
        assert [n.name for n in graph.nodes] == ["fused[linear,gelu,multiply,multiply,add]"]
        np.testing.assert_array_equal(got, want)
    # One row per batch item: blocks of rows can't be viewed as (1, rows, n); one pass.
    one = compiled(ert.asarray(x[:, :1]), ert.asarray(residual[:, :1])).numpy()
    np.testing.assert_array_equal(one, layer(x[:, :1], residual[:, :1]).numpy())


def test_compiled_matmul_by_a_matrix_runs_as_one_product_in_blocks_of_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An ONNX MatMul (batch, tokens, k) @ (k, n) and the add and GELU after it: one
    # product over every leading dimension, the epilogue on each block of rows, as
    # linear does (numpy's matmul made a BLAS call per batch item).
    seen = _counting_row_units(monkeypatch)
    x, w, b = rand(3, 400, 64), rand(64, 160), rand(160)
    ops = [ert.asarray(a) for a in (w, b)]

    def layer(x: Any) -> Any:
        return ert.gelu(ert.matmul(x, ops[0]) + ops[1])

    compiled = ert.function(layer)
    with ert.config.override(num_threads=2):
        want = layer(x).numpy()
        seen.clear()
        got = compiled(ert.asarray(x)).numpy()
        assert sorted(seen) == [0, 1, 2, 3, 4]
        graph = compiled.compiled_for(ert.asarray(x)).graph
        assert [n.name for n in graph.nodes] == ["fused[matmul,add,gelu]"]
    close(got, want, scale=4)
    small = rand(2, 3, 64)  # too small to share: numpy's matmul, then the fused loop
    close(compiled(ert.asarray(small)).numpy(), layer(small).numpy(), scale=4)


def test_linear_embedding_activations_match_torch() -> None:
    torch, F = torch_f()
    t = torch.from_numpy
    x, w, b = rand(2, 3, 5), rand(4, 5), rand(4)
    close(ert.linear(x, w, b), F.linear(t(x), t(w), t(b)).numpy())
    idx = np.array([[1, 2], [0, 3]])
    close(ert.embedding(idx, w), F.embedding(t(idx), t(w)).numpy())
    a = rand(64) * 10
    close(ert.silu(a), F.silu(t(a)).numpy())
    close(ert.softplus(a, 2.0, 3.0), F.softplus(t(a), 2.0, 3.0).numpy())
    close(ert.gelu(a), F.gelu(t(a)).numpy())
    close(ert.gelu(a, approximate="tanh"), F.gelu(t(a), approximate="tanh").numpy())


# -- attention ---------------------------------------------------------------------------------
ATTN_CASES = [
    # q shape, k shape, v shape
    ((2, 3, 5, 8), (2, 3, 7, 8), (2, 3, 7, 4)),
    ((4, 6, 16), (4, 6, 16), (4, 6, 16)),
    ((2, 1, 5, 8), (1, 3, 6, 8), (1, 3, 6, 3)),  # broadcast batch
    ((33, 20), (40, 20), (40, 9)),  # long rows: the vectorized float32 softmax
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", ATTN_CASES, ids=str)
def test_attention_matches_reference(case: Any, dtype: Any) -> None:
    qs, ks, vs = case
    q, k, v = rand(*qs, dtype=dtype), rand(*ks, dtype=dtype) * 2, rand(*vs, dtype=dtype)
    L, S = qs[-2], ks[-2]
    close(ert.scaled_dot_product_attention(q, k, v), ref_attention(q, k, v), dtype, 5)
    close(
        ert.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        ref_attention(q, k, v, causal=True, scale=0.3),
        dtype,
        5,
    )
    bool_mask = RNG.random((L, S)) > 0.4
    bool_mask[0] = False  # a query that may attend to nothing: zeros
    close(
        ert.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask),
        ref_attention(q, k, v, mask=bool_mask),
        dtype,
        5,
    )
    float_mask = rand(S, dtype=dtype)  # broadcast over queries
    close(
        ert.scaled_dot_product_attention(q, k, v, float_mask, scale=-0.5),
        ref_attention(q, k, v, mask=float_mask, scale=-0.5),
        dtype,
        5,
    )


def test_attention_nan_and_gqa() -> None:
    q, k, v = rand(1, 4, 3, 32), rand(1, 2, 3, 32), rand(1, 2, 3, 5)
    want = ref_attention(q, np.repeat(k, 2, axis=1), np.repeat(v, 2, axis=1))
    close(ert.scaled_dot_product_attention(q, k, v, enable_gqa=True), want, scale=5)
    q[0, 0, 1, 3] = np.nan
    out = ert.scaled_dot_product_attention(q, q, q).numpy()
    assert np.isnan(out[0, 0]).all()  # the nan reaches every score of that head
    assert not np.isnan(out[0, 1:]).any()


def test_attention_matches_torch() -> None:
    torch, F = torch_f()
    t = torch.from_numpy
    q, k, v = rand(2, 3, 17, 24), rand(2, 3, 19, 24), rand(2, 3, 19, 8)
    close(
        ert.scaled_dot_product_attention(q, k, v),
        F.scaled_dot_product_attention(t(q), t(k), t(v)).numpy(),
        scale=5,
    )
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), is_causal=True, scale=0.2)
    close(
        ert.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2), want.numpy(), scale=5
    )
    mask = RNG.random((2, 1, 17, 19)) > 0.5
    mask[0, 0, 3] = False
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
    close(ert.scaled_dot_product_attention(q, k, v, mask), want.numpy(), scale=5)
    fmask = rand(17, 19)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(fmask))
    close(ert.scaled_dot_product_attention(q, k, v, fmask), want.numpy(), scale=5)


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_blocks_on_two_threads(threads: int) -> None:
    # Enough heads and flops for several score blocks shared by two threads
    # (the last block short), masked and causal.
    q, k, v = rand(5, 8, 128, 32), rand(5, 8, 128, 32), rand(5, 8, 128, 16)
    mask = RNG.random((128, 128)) > 0.3
    with ert.config.override(num_threads=threads):
        close(ert.scaled_dot_product_attention(q, k, v), ref_attention(q, k, v), scale=5)
        close(
            ert.scaled_dot_product_attention(q, k, v, mask, scale=0.4),
            ref_attention(q, k, v, mask=mask, scale=0.4),
            scale=5,
        )
        close(
            ert.scaled_dot_product_attention(q, k, v, is_causal=True),
            ref_attention(q, k, v, causal=True),
            scale=5,
        )


def test_attention_kernel_strided_views() -> None:
    # Views of every kind reach the kernel's products and the softmax.
    q = rand(2, 3, 16, 9).transpose(0, 1, 3, 2)[..., ::-1, :]  # (2, 3, 9, 16), odd strides
    k = rand(2, 3, 12, 16)[:, :, ::2]  # rows two apart
    for v in (
        np.broadcast_to(rand(1, 1, 6, 5), (2, 3, 6, 5)),  # broadcast heads
        rand(2, 3, 5, 6).transpose(0, 1, 3, 2),  # a column-major value
        np.broadcast_to(rand(2, 3, 1, 5), (2, 3, 6, 5)),  # rows zero apart
    ):
        bool_mask = RNG.random((9, 6)) > 0.3
        float_mask = rand(3, 1, 6)
        for mask in (None, bool_mask, float_mask):
            got = cpu_attention._sdpa_kernel(q, k, v, mask, is_causal=False, scale=0.7)
            close(got, ref_attention(q, k, v, mask=mask, scale=0.7), scale=5)
        got = cpu_attention._sdpa_kernel(q, k, v, is_causal=True)
        close(got, ref_attention(q, k, v, causal=True), scale=5)
    empty = cpu_attention._sdpa_kernel(q[:, :, :0], k, v)  # no queries
    assert empty.shape == (2, 3, 0, 5)


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_on_heads_sliced_from_one_projection(threads: int) -> None:
    # q, k, v as a BERT layer makes them: (B, L, 3, H, D) permuted to (3, B, H, L, D),
    # so (batch, head) pairs can't be one axis without a copy: blocks copy their pairs.
    qkv = rand(6, 40, 3, 8, 16).transpose(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    keys = np.ones((6, 1, 1, 40), bool)
    with ert.config.override(num_threads=threads):
        close(cpu_attention._sdpa_kernel(q, k, v), ref_attention(q, k, v), scale=5)
        close(
            cpu_attention._sdpa_kernel(q, k, v, keys), ref_attention(q, k, v), scale=5
        )  # masks nothing
        keys[:, :, :, 30:] = False  # padding: applied per block, key by key
        keys[2, :, :, 10:] = False
        close(cpu_attention._sdpa_kernel(q, k, v, keys), ref_attention(q, k, v, mask=keys), scale=5)
        one = keys[2:3]  # one row of key mask for every batch item
        close(cpu_attention._sdpa_kernel(q, k, v, one), ref_attention(q, k, v, mask=one), scale=5)
        close(
            cpu_attention._sdpa_kernel(q, k, v, is_causal=True),
            ref_attention(q, k, v, causal=True),
            scale=5,
        )


def test_units_are_shared_once_each() -> None:
    seen: list[int] = []

    def work(units: Any, single: bool) -> None:
        for i in units:
            seen.append(i)  # list.append is atomic

    cpu_threads.shared_by_two(work, 100)
    assert sorted(seen) == list(range(100))

    def failing(units: Any, single: bool) -> None:
        for i in units:
            if i == 7:
                raise RuntimeError("unit 7")

    with pytest.raises(RuntimeError, match="unit 7"):  # from either thread
        cpu_threads.shared_by_two(failing, 20)


# -- pad, interpolate -------------------------------------------------------------------------------
PAD_CASES = [
    ((2, 1), "constant"),
    ((1, 2, 0, 3), "constant"),
    ((-1, 2, 1, -2), "constant"),
    ((0, 1, 2, 0, 1, 1), "constant"),
    ((2, 1), "reflect"),
    ((1, 3, 2, 0), "reflect"),
    ((3, 1, 0, 2), "replicate"),
    ((2, 4, 1, 1), "circular"),
]


@pytest.mark.parametrize("case", PAD_CASES, ids=str)
def test_pad(case: Any) -> None:
    pads, mode = case
    x = rand(2, 3, 4, 5)
    value = 1.5 if mode == "constant" else None
    got = ert.pad(x, pads, mode, value)
    close(got, ref_pad(x, pads, mode, value or 0.0))
    xi = np.arange(20).reshape(4, 5)  # any dtype pads
    got_int = ert.pad(xi, pads[:4], mode)
    assert got_int.dtype == xi.dtype
    np.testing.assert_array_equal(got_int.numpy(), ref_pad(xi, pads[:4], mode, 0))


@pytest.mark.parametrize("case", PAD_CASES, ids=str)
def test_pad_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    pads, mode = case
    # PyTorch's non-constant modes want a batch and a channel dimension in front
    # of the padded ones.
    x = rand(*(2, 3, 4, 5, 6)[: len(pads) // 2 + 2])
    close(ert.pad(x, pads, mode), F.pad(torch.from_numpy(x), pads, mode).numpy())


INTERP_CASES = [
    # size, scale_factor, mode, align_corners
    ((7, 9), None, "nearest", None),
    ((3, 2), None, "nearest", None),
    (None, 2, "nearest", None),
    (None, (1.5, 0.7), "nearest", None),
    ((7, 9), None, "nearest-exact", None),
    ((7, 9), None, "bilinear", False),
    ((7, 9), None, "bilinear", True),
    ((2, 3), None, "bilinear", False),
    (None, (2.5, 1.3), "bilinear", False),
    (None, 3, "bilinear", True),
    ((1, 1), None, "bilinear", True),
]


def _interp_out(x: np.ndarray, size: Any, factor: Any) -> tuple[int, int]:
    if size is not None:
        return size  # type: ignore[no-any-return]
    f = (factor, factor) if isinstance(factor, (int, float)) else factor
    return math.floor(x.shape[2] * f[0]), math.floor(x.shape[3] * f[1])


@pytest.mark.parametrize("case", INTERP_CASES, ids=str)
def test_interpolate(case: Any) -> None:
    size, factor, mode, align = case
    x = rand(2, 3, 4, 5, dtype=np.float64)
    got = ert.interpolate(x, size, factor, mode, align)
    oh, ow = _interp_out(x, size, factor)
    scales = (None, None)
    if factor is not None:  # the given factor maps coordinates, as in PyTorch
        scales = (factor, factor) if isinstance(factor, (int, float)) else factor
    close(got, ref_interpolate(x, oh, ow, mode, align, scales), np.float64)


@pytest.mark.parametrize("case", INTERP_CASES, ids=str)
def test_interpolate_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    size, factor, mode, align = case
    x = rand(2, 3, 4, 5)
    want = F.interpolate(torch.from_numpy(x), size, factor, mode, align)
    close(ert.interpolate(x, size, factor, mode, align), want.numpy())


# -- one_hot, cross_entropy ----------------------------------------------------------------------
def test_one_hot() -> None:
    idx = np.array([[0, 3], [2, 2]])
    got = ert.one_hot(idx, num_classes=5)
    assert got.shape == (2, 2, 5) and got.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), np.eye(5, dtype=np.int64)[idx])


CE_CASES = [
    # logits shape, weighted, ignore some, reduction, label_smoothing
    ((6, 4), False, False, "mean", 0.0),
    ((6, 4), True, True, "mean", 0.0),
    ((6, 4), True, True, "sum", 0.2),
    ((6, 4), False, True, "none", 0.1),
    ((3, 5, 2, 3), True, True, "mean", 0.3),
    ((3, 5, 2, 3), False, False, "none", 0.0),
    ((2, 20), False, True, "mean", 0.05),  # rows long enough for the numba log-softmax
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CE_CASES, ids=str)
def test_cross_entropy(case: Any, dtype: Any) -> None:
    shape, weighted, ignore, reduction, ls = case
    x = rand(*shape, dtype=dtype) * 3
    t = RNG.integers(0, shape[1], (shape[0], *shape[2:]))
    if ignore:
        t.reshape(-1)[::3] = 7 if shape[1] < 7 else -100
    ignore_index = 7 if ignore and shape[1] < 7 else -100
    w = np.abs(rand(shape[1], dtype=dtype)) + 0.1 if weighted else None
    got = ert.cross_entropy(
        x, t, w, ignore_index=ignore_index, reduction=reduction, label_smoothing=ls
    )
    want = ref_cross_entropy(x, t, w, ignore_index, reduction, ls)
    assert got.dtype == dtype
    close(got, want.reshape(got.shape), dtype, scale=5)


def test_cross_entropy_unbatched_and_probabilities() -> None:
    x = rand(4, dtype=np.float64)
    logp = x - np.log(np.exp(x).sum())
    close(ert.cross_entropy(x, np.array(2)), -logp[2], np.float64)
    probs = np.abs(rand(3, 4, dtype=np.float64))
    probs /= probs.sum(1, keepdims=True)
    xb = rand(3, 4, dtype=np.float64)
    lp = xb - np.log(np.exp(xb).sum(1, keepdims=True))
    close(ert.cross_entropy(xb, probs), -(lp * probs).sum(1).mean(), np.float64)
    close(ert.cross_entropy(xb, probs, reduction="none"), -(lp * probs).sum(1), np.float64)


@pytest.mark.parametrize("case", CE_CASES, ids=str)
def test_cross_entropy_matches_torch(case: Any) -> None:
    torch, F = torch_f()
    shape, weighted, ignore, reduction, ls = case
    x = rand(*shape) * 3
    t = RNG.integers(0, shape[1], (shape[0], *shape[2:]))
    if ignore:
        t.reshape(-1)[::3] = -100
    w = np.abs(rand(shape[1])) + 0.1 if weighted else None
    want = F.cross_entropy(
        torch.from_numpy(x), torch.from_numpy(t), None if w is None else torch.from_numpy(w),
        reduction=reduction, label_smoothing=ls,
    )  # fmt: skip
    got = ert.cross_entropy(x, t, w, reduction=reduction, label_smoothing=ls)
    close(got, want.numpy(), scale=5)
    probs = np.abs(rand(*shape))
    probs /= probs.sum(1, keepdims=True)
    want = F.cross_entropy(
        torch.from_numpy(x), torch.from_numpy(probs), reduction=reduction, label_smoothing=ls
    )
    close(
        ert.cross_entropy(x, probs, reduction=reduction, label_smoothing=ls), want.numpy(), scale=5
    )


# -- errors ---------------------------------------------------------------------------------------
x4 = np.zeros((1, 4, 6, 6), np.float32)
w4 = np.zeros((2, 4, 3, 3), np.float32)

CALL_ERRORS = [
    (ert.ShapeError, lambda: ert.conv2d(x4, np.zeros((2, 3, 3, 3), np.float32))),
    (ert.ShapeError, lambda: ert.conv2d(x4[0, 0], w4)),
    (ert.ShapeError, lambda: ert.conv2d(x4, w4, np.zeros(3, np.float32))),
    (ert.ShapeError, lambda: ert.conv2d(x4, np.zeros((3, 2, 3, 3), np.float32), groups=2)),
    (ert.ShapeError, lambda: ert.conv2d(x4, np.zeros((2, 4, 9, 9), np.float32))),
    (ert.DTypeError, lambda: ert.conv2d(x4.astype(np.int64), w4)),
    (ert.DTypeError, lambda: ert.conv2d(x4, w4.astype(np.float64))),
    (ert.ArgumentError, lambda: ert.conv2d(x4, w4, stride=0)),
    (ert.ArgumentError, lambda: ert.conv2d(x4, w4, stride=2, padding="same")),
    (ert.ArgumentError, lambda: ert.conv2d(x4, w4, padding="full")),
    (ert.ArgumentError, lambda: ert.conv2d(x4, w4, padding=(1, 2, 3))),
    (ert.DTypeError, lambda: ert.conv2d(x4, w4, stride=1.5)),
    (ert.ArgumentError, lambda: ert.conv2d(x4, w4, groups=0)),
    (ert.ShapeError, lambda: ert.conv_transpose2d(x4, np.zeros((3, 2, 3, 3), np.float32))),
    (
        ert.ArgumentError,
        lambda: ert.conv_transpose2d(x4, w4.transpose(1, 0, 2, 3), output_padding=1),
    ),
    (ert.ArgumentError, lambda: ert.max_pool2d(x4, 2, padding=2)),
    (ert.ShapeError, lambda: ert.max_pool2d(x4, 7)),
    (ert.DTypeError, lambda: ert.avg_pool2d(x4.astype(np.int32), 2)),
    (ert.ArgumentError, lambda: ert.avg_pool2d(x4, 2, divisor_override=0)),
    (ert.ArgumentError, lambda: ert.adaptive_avg_pool2d(x4, (1, 2, 3))),
    (ert.ShapeError, lambda: ert.batch_norm(x4, np.zeros(3, np.float32), np.ones(4, np.float32))),
    (
        ert.ArgumentError,
        lambda: ert.batch_norm(x4, np.zeros(4, np.float32), np.ones(4, np.float32), training=True),
    ),
    (ert.ShapeError, lambda: ert.layer_norm(x4, (5,))),
    (ert.ShapeError, lambda: ert.layer_norm(x4, (6,), np.ones(5, np.float32))),
    (ert.ShapeError, lambda: ert.group_norm(x4, 3)),
    (ert.ShapeError, lambda: ert.linear(x4, np.zeros((2, 5), np.float32))),
    (ert.DTypeError, lambda: ert.embedding(np.zeros(2, np.float32), np.zeros((3, 2)))),
    (ert.ArgumentError, lambda: ert.embedding(np.zeros(2, int), np.zeros((3, 2)), padding_idx=3)),
    (ert.DTypeError, lambda: ert.silu(np.zeros(2, complex))),
    (ert.ArgumentError, lambda: ert.softplus(np.zeros(2), beta=0)),
    (ert.ShapeError, lambda: ert.scaled_dot_product_attention(x4, x4[..., :5], x4)),
    (ert.ShapeError, lambda: ert.scaled_dot_product_attention(x4, x4, x4[..., :5, :])),
    (ert.ShapeError, lambda: ert.scaled_dot_product_attention(x4, x4, x4, np.ones((5, 6), bool))),
    (ert.DTypeError, lambda: ert.scaled_dot_product_attention(x4, x4, x4, np.ones((6, 6), int))),
    (
        ert.ArgumentError,
        lambda: ert.scaled_dot_product_attention(x4, x4, x4, np.ones((6, 6), bool), is_causal=True),
    ),
    (ert.ArgumentError, lambda: ert.scaled_dot_product_attention(x4, x4, x4, dropout_p=0.1)),
    (ert.ArgumentError, lambda: ert.pad(x4, (1,))),
    (ert.ArgumentError, lambda: ert.pad(x4, (1, 1), mode="wrap")),
    (ert.ShapeError, lambda: ert.pad(x4, (6, 0), mode="reflect")),
    (ert.ArgumentError, lambda: ert.pad(x4, (1, 1), mode="reflect", value=1.0)),
    (ert.ShapeError, lambda: ert.pad(x4, (-4, -3))),
    (ert.ArgumentError, lambda: ert.interpolate(x4, (3, 3), 2.0)),
    (ert.ArgumentError, lambda: ert.interpolate(x4, (3, 3), mode="bicubic")),
    (ert.ArgumentError, lambda: ert.interpolate(x4, (3, 3), align_corners=True)),
    (ert.ShapeError, lambda: ert.interpolate(x4[0], (3, 3))),
    (ert.ArgumentError, lambda: ert.one_hot(np.zeros(3, int))),
    (ert.DTypeError, lambda: ert.one_hot(np.zeros(3), 4)),
    (ert.ShapeError, lambda: ert.cross_entropy(np.zeros((3, 4)), np.zeros(4, int))),
    (
        ert.ArgumentError,
        lambda: ert.cross_entropy(np.zeros((3, 4)), np.zeros(3, int), reduction="avg"),
    ),
    (
        ert.ArgumentError,
        lambda: ert.cross_entropy(np.zeros((3, 4)), np.zeros(3, int), label_smoothing=2.0),
    ),
    (ert.DTypeError, lambda: ert.cross_entropy(np.zeros((3, 4)), np.zeros(3, bool))),
]


@pytest.mark.parametrize("case", range(len(CALL_ERRORS)))
def test_bad_calls_fail_at_the_call(case: int) -> None:
    kind, call = CALL_ERRORS[case]
    with pytest.raises(kind) as info:
        call()
    assert "test_nn.py" in str(info.value)  # the message names the user's line


def test_kernel_failures_raise_on_await() -> None:
    table = ert.asarray(rand(4, 2))
    bad = ert.embedding(ert.asarray([1, 4]), table)  # the call itself succeeds
    with pytest.raises(ert.KernelError, match="out of range") as info:
        bad.numpy()
    assert isinstance(info.value.__cause__, IndexError)
    with pytest.raises(ert.KernelError, match="out of range"):
        asyncio.run(_await(ert.embedding(ert.asarray([-1]), table)))
    with pytest.raises(ert.KernelError, match="num_classes"):
        ert.one_hot(ert.asarray([0, 3]), 3).numpy()
    with pytest.raises(ert.KernelError, match="out of range"):
        ert.cross_entropy(rand(2, 3), np.array([0, 3])).numpy()
    # An ignored target may hold any value.
    assert math.isfinite(ert.cross_entropy(rand(2, 3), np.array([0, -100])).item())


def test_ops_are_registered_and_heavy_calls_offload() -> None:
    for name in ("conv2d", "scaled_dot_product_attention", "cross_entropy", "layer_norm"):
        assert ert.get_op(name).name == name
    before = ert.stats().ops_offloaded
    big = ert.conv2d(ert.ones((4, 16, 32, 32)), ert.ones((16, 16, 3, 3)), padding=1)
    assert big.numpy()[0, 0, 5, 5] == 16 * 9
    assert ert.stats().ops_offloaded > before


def test_blas_threads_come_back_after_threads_leave_single_blas_out_of_order() -> None:
    """numpy's OpenBLAS applies its "thread-local" count process-wide: two threads
    that each saved and restored it, leaving in the other order than they came,
    used to leave BLAS on one thread for the rest of the process (every product
    after it at half speed on two cores)."""
    import threading

    fn = cpu_threads._blas_local()
    if fn is None:
        pytest.skip("numpy's BLAS is not an OpenBLAS with a settable thread count")
    default = cpu_threads._blas_default_threads
    inside = threading.Barrier(2)
    first_out = threading.Event()

    def hold(leave_first: bool) -> None:
        def work(single: bool) -> None:
            assert single
            inside.wait(5)  # both threads hold BLAS at one thread now
            if not leave_first:
                first_out.wait(5)

        cpu_threads.one_blas_thread(work)
        if leave_first:
            first_out.set()

    threads = [threading.Thread(target=hold, args=(first,)) for first in (True, False)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    in_force = fn(default)  # returns the count in force, and leaves the default
    assert in_force == default


def test_a_split_does_not_wait_for_a_helper_busy_with_another_callers_split() -> None:
    """Two workers each running a model share one helper thread: a caller that did
    every unit itself must not then wait for its share queued behind the other's."""
    import threading

    busy = threading.Event()
    release = threading.Event()

    def occupy() -> None:
        busy.set()
        release.wait(10)

    cpu_threads.helper_pool().submit(occupy)  # the other caller's share, still running
    assert busy.wait(5)
    done: list[int] = []

    def work(units: Any, single: bool) -> None:
        done.extend(units)

    finished = threading.Event()

    def split() -> None:
        cpu_threads.shared_by_two(work, 6)
        finished.set()

    caller = threading.Thread(target=split)
    caller.start()
    try:
        assert finished.wait(5), "the split waited for the busy helper"
        assert sorted(done) == list(range(6))
    finally:
        release.set()
        caller.join(10)


def test_busy_besides_caller_counts_the_other_tasks_not_the_callers_own() -> None:
    import threading

    from eagerrt.lowlevel import WorkerPool

    pool = WorkerPool(2, "busy-test")
    release = threading.Event()
    try:
        assert pool.busy_besides_caller() == 0
        started, looked = threading.Event(), threading.Event()
        seen: list[int] = []

        def hold() -> None:
            started.set()
            release.wait(10)

        def look() -> None:
            seen.append(pool.busy_besides_caller())  # on a worker: the hold, not itself
            looked.set()

        pool.submit(hold)
        assert started.wait(5)
        assert pool.busy_besides_caller() == 1  # from outside the pool: the hold
        pool.submit(look)
        assert looked.wait(5)
        assert seen == [1]
    finally:
        release.set()
        pool.shutdown()


def test_a_kernel_does_its_whole_split_itself_while_other_tasks_have_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Other requests' models on the other workers: a kernel's split would only take
    their cores, so every unit runs on the calling thread, BLAS held to it."""
    import threading

    monkeypatch.setattr(cpu_threads, "cores_taken", lambda others=1: True)
    threads: set[int] = set()
    done: list[int] = []

    def work(units: Any, single: bool) -> None:
        for unit in units:
            threads.add(threading.get_ident())
            done.append(unit)

    cpu_threads.shared_by_two(work, 6)
    assert done == list(range(6)) and threads == {threading.get_ident()}
    x, w = rand(2, 50, 64), rand(96, 64)
    close(ert.linear(x, w).numpy(), x @ w.T, scale=5)  # the one-product path, held too
    weight = ert.asarray(w.T.copy())
    product = ert.function(lambda x: ert.matmul(x, weight))  # graph mode's matmul, held
    close(product(ert.asarray(x)).numpy(), x @ w.T, scale=5)


def test_layer_and_group_norm_split_by_rows_over_two_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cpu_norm, "_NORMALIZE_SPLIT", 0)
    monkeypatch.setattr(cpu_threads, "_MIN_CHUNK_ROWS", 1)
    x, w, b = rand(3, 7, 10), rand(10), rand(10)
    mean = x.mean(-1, keepdims=True)
    want = (x - mean) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w + b
    close(ert.layer_norm(x, (10,), w, b).numpy(), want, scale=5)
    g = x.reshape(3, 7, 2, 5)  # group_norm, a group per channel: 7 channels of 2x5
    got = ert.group_norm(g, 7).numpy()
    gm = g.mean((2, 3), keepdims=True)
    close(got, (g - gm) / np.sqrt(g.var((2, 3), keepdims=True) + 1e-5), scale=5)


def test_layer_norm_and_attention_write_into_a_given_buffer() -> None:
    # Graph mode's out forms: the result lands in the plan's buffer, contiguous
    # (written in place) or strided (computed apart, then copied in).
    x, w, b = rand(3, 7, 10), rand(10), rand(10)
    want = cpu_norm._layer_norm_kernel(
        x, w, b, normalized_shape=(10,), has_weight=True, has_bias=True, eps=1e-6
    )
    for out in (np.full((3, 7, 10), np.nan, np.float32), np.full((3, 7, 20), np.nan, np.float32)):
        into = out if out.shape[-1] == 10 else out[..., ::2]
        cpu_norm.layer_norm_into(
            x, w, b, into, normalized_shape=(10,), has_weight=True, has_bias=True, eps=1e-6
        )
        close(into, want)
    q, k, v = rand(2, 3, 9, 8), rand(2, 3, 11, 8), rand(2, 3, 11, 5)
    mask = RNG.random((2, 1, 1, 11)) > 0.3
    want = ref_attention(q, k, v, mask=mask)
    for out in (
        np.full((2, 3, 9, 5), np.nan, np.float32),
        np.full((2, 3, 9, 10), np.nan, np.float32),
    ):
        into = out if out.shape[-1] == 5 else out[..., ::2]
        cpu_attention.sdpa_out_form([q, k, v, mask], {})(q, k, v, mask, into)
        close(into, want, scale=5)
    causal = cpu_attention.sdpa_out_form([q, k, v], {"is_causal": True})
    causal(q, k, v, into)  # no mask operand
    close(into, ref_attention(q, k, v, causal=True), scale=5)
    # Heads merged: a (B, L, H, E) buffer, each head's rows written strided.
    merged = np.full((2, 9, 3, 5), np.nan, np.float32)
    cpu_attention.sdpa_out_form([q, k, v, mask], {}, merged_heads=True)(q, k, v, mask, merged)
    close(merged, want.transpose(0, 2, 1, 3), scale=5)


@pytest.mark.parametrize("threads", [1, 2])
def test_attention_work_arrays_are_kept_per_thread_and_resized(
    threads: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Layer after layer reuses one thread's work arrays; a call with bigger blocks
    # gets bigger ones, and blocks over the limit are never kept. (The blocked
    # form's arrays: the shared pool's form, where it runs, is turned off here.)
    monkeypatch.setattr(cpu_threads, "_work_arrays", __import__("threading").local())
    from eagerrt.backends.cpu import shared_pool as _shared_pool

    monkeypatch.setattr(_shared_pool, "ready", lambda: False)
    with ert.config.override(num_threads=threads):
        for shape in [(1, 4, 16, 8), (2, 6, 40, 8), (1, 4, 16, 8), (2, 6, 40, 8)]:
            qkv = rand(*shape[:1], shape[2], 3, shape[1], shape[3]).transpose(2, 0, 3, 1, 4)
            got = cpu_attention._sdpa_kernel(qkv[0], qkv[1], qkv[2])
            close(got, ref_attention(qkv[0], qkv[1], qkv[2]), scale=5)
    kept = cpu_threads._work_arrays.kept
    scores = kept["attention scores"][0]
    assert scores.nbytes == 6 * 40 * 40 * 4  # blocks of half the 12 (batch, head) pairs
    again = cpu_threads.work_array("attention scores", (2, 5), np.dtype(np.float64))
    assert np.shares_memory(again, scores)
    # The same shape gets the same view back, not a new one.
    assert cpu_threads.work_array("attention scores", (2, 5), np.dtype(np.float64)) is again
    monkeypatch.setattr(cpu_threads, "KEPT_WORK_BYTES", 64)
    big = cpu_threads.work_array("attention scores", (100,), np.dtype(np.float32))
    assert not np.shares_memory(big, kept["attention scores"][0])


# -- attention on the shared pool ---------------------------------------------------------
def pool_or_skip() -> None:
    from eagerrt.backends.cpu import shared_pool as _shared_pool

    if not _shared_pool.ready():
        pytest.skip("MKL on oneTBB (the mkl extra) with numba's loops on oneTBB is not here")


def heads_from_projection(
    batch: int, length: int, heads: int, embed: int, dtype: Any = np.float32
) -> list[np.ndarray]:
    """q, k, v as a model splits them out of one fused projection: strided views."""
    qkv = rand(batch, length, 3 * heads * embed, dtype=dtype)
    return [
        qkv[..., i * heads * embed : (i + 1) * heads * embed]
        .reshape(batch, length, heads, embed)
        .transpose(0, 2, 1, 3)
        for i in range(3)
    ]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_attention_on_the_shared_pool_matches_the_reference(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every form the pool's kernel takes: plain, causal, key-padding masks of one
    # or every batch item, grouped-query heads, heads strided in a projection,
    # a broadcast batch, 3-d and 2-d inputs; and each call went to that kernel.
    pool_or_skip()
    from eagerrt.backends.cpu import numba_nn as _numba_nn

    calls = []
    kernel = _numba_nn.attention_heads
    monkeypatch.setattr(_numba_nn, "attention_heads", lambda *a: calls.append(1) or kernel(*a))
    q, k, v = (
        rand(2, 4, 9, 8, dtype=dtype),
        rand(2, 4, 11, 8, dtype=dtype),
        rand(2, 4, 11, 5, dtype=dtype),
    )
    mask = RNG.random((2, 1, 1, 11)) > 0.3
    mask[1, ..., :] = False  # batch item 1 attends to nothing: zeros, as PyTorch
    kg, vg = k[:, :2], v[:, :2]
    qs, ks, vs = heads_from_projection(2, 11, 4, 8, dtype)
    cases = [
        ((q, k, v), {}, ref_attention(q, k, v)),
        ((q, k, v), {"is_causal": True}, ref_attention(q, k, v, causal=True)),
        ((q, k, v, mask), {}, ref_attention(q, k, v, mask=mask)),
        ((q, k, v, mask[:1]), {}, ref_attention(q, k, v, mask=mask[:1])),
        (
            (q, kg, vg),
            {"enable_gqa": True},
            ref_attention(q, np.repeat(kg, 2, 1), np.repeat(vg, 2, 1)),
        ),
        ((qs, ks, vs), {}, ref_attention(qs, ks, vs)),
        ((q, k[:1], v[:1]), {"scale": 0.3}, ref_attention(q, k[:1], v[:1], scale=0.3)),
        ((q[0], k[0], v[0]), {}, ref_attention(q[0], k[0], v[0])),
        ((q[0, 0], k[0, 0], v[0, 0]), {}, ref_attention(q[0, 0], k[0, 0], v[0, 0])),
    ]
    for args, kwargs, want in cases:
        close(cpu_attention._sdpa_kernel(*args, **kwargs), want, dtype=dtype, scale=5)
    assert len(calls) == len(cases)


def test_planned_attention_steps_aside_for_settings_changed_after_setup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Graph mode's attention is set up once; numpy's BLAS asked for, or the
    # threads changed, after that: the call runs the blocked forms, as eager does.
    pool_or_skip()
    from eagerrt.backends.cpu import numba_nn as _numba_nn

    calls = []
    kernel = _numba_nn.attention_heads
    monkeypatch.setattr(_numba_nn, "attention_heads", lambda *a: calls.append(1) or kernel(*a))
    q, k, v = rand(2, 4, 9, 8), rand(2, 4, 11, 8), rand(2, 4, 11, 5)
    want = ref_attention(q, k, v)
    with ert.config.override(num_threads=2):
        form = cpu_attention.sdpa_out_form([q, k, v], {})
        out = np.empty((2, 4, 9, 5), np.float32)
        form(q, k, v, out)
        close(out, want, scale=5)
        assert len(calls) == 1
        for changed in ({"blas": "numpy"}, {"num_threads": 1}):
            with ert.config.override(**changed):
                out = np.full((2, 4, 9, 5), np.nan, np.float32)
                form(q, k, v, out)
                close(out, want, scale=5)
    assert len(calls) == 1


def test_attention_on_the_shared_pool_writes_into_a_strided_buffer_in_place() -> None:
    # A plan's buffer in merged-heads layout (B, L, H, E) seen as (B, H, L, E):
    # written where it lies, no copy; an overlapping buffer and a float mask
    # take the blocked form and are still right.
    pool_or_skip()
    q, k, v = heads_from_projection(2, 16, 3, 8)
    want = ref_attention(q, k, v)
    merged = np.full((2, 16, 3, 8), np.nan, np.float32)
    into = merged.transpose(0, 2, 1, 3)
    assert cpu_attention._attention(q, k, v, None, into, False, None, False) is into
    close(merged.transpose(0, 2, 1, 3), want, scale=5)
    fmask = rand(16, 16)
    close(cpu_attention._sdpa_kernel(q, k, v, fmask), ref_attention(q, k, v, mask=fmask), scale=5)
    overlapping = np.ascontiguousarray(q)
    got = cpu_attention._attention(overlapping, k, v, None, overlapping, False, None, False)
    close(got, want, scale=5)
    wider = np.full((2, 3, 16, 8), np.nan, np.float64)  # another dtype: cast in, still there
    cpu_attention._attention(q, k, v, None, wider, False, None, False)
    close(wider, want, scale=5)


def test_the_shared_pool_is_used_only_on_onetbb_and_with_two_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from eagerrt.backends.cpu import shared_pool as _shared_pool

    pool_or_skip()
    with ert.config.override(num_threads=1):
        assert not _shared_pool.ready()
    with ert.config.override(blas="numpy"):
        assert not _shared_pool.ready()
    monkeypatch.setattr(_shared_pool, "_on_tbb", False)  # numba chose another layer
    assert not _shared_pool.ready()
    q, k, v = rand(1, 2, 5, 4), rand(1, 2, 6, 4), rand(1, 2, 6, 4)
    close(cpu_attention._sdpa_kernel(q, k, v), ref_attention(q, k, v), scale=5)


# -- convolutions of one image on the shared pool -------------------------------------------
def spy_pool_convolutions(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the pool's convolution kernels as they run."""
    from eagerrt.backends.cpu import numba_nn as _numba_nn

    calls: list[str] = []
    for name in ("winograd_on_pool", "gathered_on_pool", "gathered_blocks_on_pool"):
        kernel = getattr(_numba_nn, name)
        spy = lambda *a, _k=kernel, _n=name: calls.append(_n) or _k(*a)  # noqa: E731
        monkeypatch.setattr(_numba_nn, name, spy)
    return calls


#: (image, weight, stride, padding, dilation, with bias, the pool's kernel)
POOL_CONVS = [
    ((16, 18, 18), (24, 16, 3, 3), 1, (1, 1), 1, True, "winograd_on_pool"),
    ((16, 17, 17), (24, 16, 3, 3), 1, (1, 1), 1, False, "winograd_on_pool"),  # odd: border tiles
    ((32, 20, 20), (32, 32, 3, 3), 2, (1, 1), 1, True, "gathered_on_pool"),
    ((16, 20, 20), (32, 16, 3, 3), 1, (2, 2), 2, False, "gathered_on_pool"),  # dilated
    ((16, 21, 19), (40, 16, 5, 3), 1, (2, 1), 1, True, "gathered_on_pool"),
    ((3, 40, 40), (64, 3, 3, 3), 1, (1, 1), 1, True, "gathered_on_pool"),  # 3 channels: im2col
    ((64, 16, 16), (64, 64, 1, 1), 1, (0, 0), 1, True, "gathered_on_pool"),  # its own im2col
    ((64, 16, 16), (128, 64, 1, 1), 2, (0, 0), 1, False, "gathered_on_pool"),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_image_convolutions_run_on_the_shared_pool(
    dtype: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Winograd, im2col at a stride, dilated, with wide and uneven kernels, and 1x1
    # (the image its own im2col matrix): each equal to the tap-by-tap reference,
    # 3-d and 4-d, and each run by the pool's kernel it belongs to.
    pool_or_skip()
    calls = spy_pool_convolutions(monkeypatch)
    for image, wshape, stride, (ph, pw), dilation, with_bias, kernel in POOL_CONVS:
        x, w = rand(1, *image, dtype=dtype), rand(*wshape, dtype=dtype)
        b = rand(wshape[0], dtype=dtype) if with_bias else None
        want = ref_conv2d(x, w, b, (stride,) * 2, (ph, ph, pw, pw), (dilation,) * 2, 1)
        for arg in (x, x[0]):
            calls.clear()
            got = cpu_conv._conv2d_kernel(
                arg, w, b, stride=stride, padding=(ph, pw), dilation=dilation
            )
            close(got, want if arg.ndim == 4 else want[0], dtype=dtype, scale=5)
            assert calls == [kernel], (image, wshape, calls)


@pytest.mark.parametrize("batch", [2, 5])
def test_batch_convolutions_run_on_the_shared_pool(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A batch's blocks on the pool: several small images a block (their products
    # copied into place), an image a block (in place), rows of one image a
    # block (big images), Winograd's whole images and tile rows; all equal to
    # the reference, with the im2col forms' blocks made small to take every kind.
    pool_or_skip()
    calls = spy_pool_convolutions(monkeypatch)
    for limit in (1 << 20, 1 << 14, 1 << 12):
        monkeypatch.setattr(cpu_conv, "_IM2COL_BYTES", limit)
        for image, wshape, stride, (ph, pw), dilation, with_bias, kernel in POOL_CONVS:
            x, w = rand(batch, *image), rand(*wshape)
            b = rand(wshape[0]) if with_bias else None
            want = ref_conv2d(x, w, b, (stride,) * 2, (ph, ph, pw, pw), (dilation,) * 2, 1)
            calls.clear()
            got = cpu_conv._conv2d_kernel(
                x, w, b, stride=stride, padding=(ph, pw), dilation=dilation
            )
            close(got, want, scale=5)
            name = "gathered_blocks_on_pool" if kernel == "gathered_on_pool" else kernel
            assert calls == [name], (image, wshape, limit, calls)


def test_pool_convolutions_fall_back_where_they_cannot_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # Groups and too little work take the other forms; a changed thread count
    # since a compiled convolution's setup too. The results are still right.
    pool_or_skip()
    calls = spy_pool_convolutions(monkeypatch)
    x, w, b = rand(1, 16, 18, 18), rand(24, 16, 3, 3), rand(24)
    want = ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    wg = rand(24, 8, 3, 3)
    close(
        cpu_conv._conv2d_kernel(x, wg, b, padding=1, groups=2),
        ref_conv2d(x, wg, b, (1, 1), (1, 1, 1, 1), (1, 1), 2),
        scale=5,
    )
    small = rand(1, 4, 6, 6)
    close(
        cpu_conv._conv2d_kernel(small, w[:, :4], b, padding=1),
        ref_conv2d(small, w[:, :4], b, (1, 1), (1, 1, 1, 1), (1, 1), 1),
        scale=5,
    )
    assert calls == []
    g = nn_conv.conv_geometry(x, w, b, 1, 1, 1, 1)
    pooled = cpu_conv._pooled_conv(g, w, cpu_conv._winograd_u(w, g), np.dtype(np.float32))
    assert pooled is not None
    out = np.empty_like(want, dtype=np.float32)
    with ert.config.override(num_threads=1):  # since the setup (for two)
        assert not pooled(x, b, out)
    with ert.config.override(blas="numpy"):  # numpy's BLAS asked for since the setup
        assert not pooled(x, b, out)
    assert not pooled(np.asfortranarray(x), b, out)
    assert pooled(x, b, out) and calls == ["winograd_on_pool"]
    close(out, want, scale=5)


def test_pool_convolutions_run_alone_while_other_tasks_have_the_cores(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Other requests' tasks on the other cores: the pool's kernels still run (no
    # Python between blocks), but on this thread alone, MKL held to it as well.
    import numba

    from eagerrt.backends.cpu import blas as _blas
    from eagerrt.backends.cpu import numba_nn as _numba_nn

    pool_or_skip()
    seen: list[tuple[int, int | None]] = []
    for name in ("winograd_on_pool", "gathered_on_pool", "gathered_blocks_on_pool"):
        kernel = getattr(_numba_nn, name)

        def spy(*a: Any, _k: Any = kernel) -> None:
            held = _blas.hold_to_one_thread()  # what MKL's count was, set back at once
            _blas.release_thread_hold(held)
            seen.append((numba.get_num_threads(), held))
            _k(*a)

        monkeypatch.setattr(_numba_nn, name, spy)
    monkeypatch.setattr(cpu_threads, "cores_taken", lambda others=1: True)
    for batch in (1, 3):
        x, w, b = rand(batch, 16, 18, 18), rand(24, 16, 3, 3), rand(24)
        want = ref_conv2d(x, w, b, (1, 1), (1, 1, 1, 1), (1, 1), 1)
        close(cpu_conv._conv2d_kernel(x, w, b, padding=1), want, scale=5)
        w2, b2 = rand(48, 16, 3, 3), rand(48)
        want = ref_conv2d(x, w2, b2, (2, 2), (1, 1, 1, 1), (1, 1), 1)
        close(cpu_conv._conv2d_kernel(x, w2, b2, stride=2, padding=1), want, scale=5)
    assert len(seen) == 4 and all(s == (1, 1) for s in seen)


@pytest.mark.parametrize("batch", [1, 3])
def test_compiled_convolutions_set_up_for_the_pool_once(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Graph mode with constant weights: the pool's setup is made when the plan
    # is, each call runs the pool's kernels, and the fused epilogue (a residual
    # add and relu) runs over every image; equal to eager numpy.
    pool_or_skip()
    calls = spy_pool_convolutions(monkeypatch)
    made: list[int] = []
    setup = cpu_conv._PooledConv.__init__
    monkeypatch.setattr(
        cpu_conv._PooledConv, "__init__", lambda self, *a: made.append(1) or setup(self, *a)
    )
    w1, w2, b1 = rand(32, 64, 3, 3), rand(32, 32, 3, 3), rand(32)
    ws = rand(32, 64, 1, 1)
    consts = [ert.asarray(a) for a in (w1, w2, b1, ws)]

    @ert.function
    def block(x: Any) -> Any:
        cw1, cw2, cb1, cws = consts
        y = ert.relu(ert.conv2d(x, cw1, cb1, padding=1))
        skip = ert.conv2d(x, cws, stride=2)
        return ert.relu(ert.conv2d(y, cw2, stride=2, padding=1) + skip)

    x = rand(batch, 64, 32, 32)
    y = np.maximum(ref_conv2d(x, w1, b1, (1, 1), (1, 1, 1, 1), (1, 1), 1), 0)
    skip = ref_conv2d(x, ws, None, (2, 2), (0, 0, 0, 0), (1, 1), 1)
    want = np.maximum(ref_conv2d(y, w2, None, (2, 2), (1, 1, 1, 1), (1, 1), 1) + skip, 0)
    for _ in range(2):
        calls.clear()
        close(block(ert.asarray(x)), want, scale=20)
        gathered = "gathered_on_pool" if batch == 1 else "gathered_blocks_on_pool"
        assert sorted(calls) == [gathered] * 2 + ["winograd_on_pool"]
    assert len(made) == 3  # once per convolution, when the plan was made
    calls.clear()
    with ert.config.override(blas="numpy"):  # the same plan, now on numpy's BLAS
        close(block(ert.asarray(x)), want, scale=20)
    assert calls == []


def test_pool_blocks_come_in_a_multiple_of_the_threads() -> None:
    # Three blocks on two threads leave a core idle a third of the time: a
    # batch's blocks are made as many as a multiple of the threads where they can.
    assert cpu_conv._balanced_share(32, 12, 2) == 8  # four blocks of 8, not three of 11
    assert cpu_conv._balanced_share(32, 7, 2) == 6  # six blocks (the last of 2), not five
    assert cpu_conv._balanced_share(3, 5, 2) == 2  # two blocks at most for three images
    assert cpu_conv._balanced_share(1, 4, 2) == 1
    x, w = rand(32, 256, 8, 8), rand(256, 256, 3, 3)
    g = nn_conv.conv_geometry(x, w, None, 1, 1, 1, 1)
    blocks = cpu_conv._winograd_blocks_of(g, np.dtype(np.float32), 2)
    assert len(blocks) % 2 == 0 and sum(n1 - n0 for n0, n1, *_ in blocks) == 32
    blocks = cpu_conv._gathered_blocks_of(g, np.dtype(np.float32), 2)
    assert len(blocks) % 2 == 0 and sum(n1 - n0 for n0, n1, *_ in blocks) == 32


def test_a_pool_work_area_taken_over_mid_iteration_is_fresh() -> None:
    # A thread handed another iteration of the loop while it waits inside MKL
    # (oneTBB may) must not reuse the work area the interrupted one is using.
    from eagerrt.backends.cpu.numba_nn import _work_areas

    a, b, busy = np.zeros((1, 4, 4)), np.zeros((1, 2, 3)), np.zeros(1, np.bool_)
    first_a, first_b, mine, nested = _work_areas(a, b, busy)  # outside a loop: thread 0
    assert mine == 0 and not nested and busy[0]
    assert np.shares_memory(first_a, a) and np.shares_memory(first_b, b)
    again_a, again_b, _, nested = _work_areas(a, b, busy)  # before the first is done
    assert nested and again_a.shape == (4, 4) and again_b.shape == (2, 3)
    assert not np.shares_memory(again_a, a) and not np.shares_memory(again_b, b)
