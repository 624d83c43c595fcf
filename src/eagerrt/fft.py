"""The Array API's ``fft`` extension: ``eagerrt.fft``.

Discrete Fourier transforms computed by ``numpy.fft``, each returning a Tensor
at once with its shape and dtype (complex64 from float32 or complex64 input,
as numpy 2 and the standard have it) and running inline or on a worker by its
cost.

>>> import eagerrt as ert
>>> x = ert.asarray([0.0, 1.0, 0.0, -1.0], dtype="float32")
>>> spectrum = ert.fft.rfft(x)
>>> spectrum.dtype, spectrum.shape
(dtype('complex64'), (3,))
>>> ert.fft.irfft(spectrum, n=4).numpy()
array([ 0.,  1.,  0., -1.], dtype=float32)
"""

from __future__ import annotations

from .ops.fft import (
    fft,
    fftfreq,
    fftn,
    fftshift,
    hfft,
    ifft,
    ifftn,
    ifftshift,
    ihfft,
    irfft,
    irfftn,
    rfft,
    rfftfreq,
    rfftn,
)

__all__ = [
    "fft",
    "fftfreq",
    "fftn",
    "fftshift",
    "hfft",
    "ifft",
    "ifftn",
    "ifftshift",
    "ihfft",
    "irfft",
    "irfftn",
    "rfft",
    "rfftfreq",
    "rfftn",
]
