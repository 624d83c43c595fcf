"""Device backends: what each device brings to eagerrt (see :mod:`eagerrt.graph.backend`).

A backend registers its device's kernels and out forms as it is imported, and
defines ``backend``, whose passes and compiler graph mode asks for. The CPU's
(:mod:`.cpu`) fuses graphs into generated numba code; stream devices'
(:mod:`.stream`) run a graph as one native plan where the device takes them;
the cuda device's (:mod:`.cuda`) adds CuPy, cuBLAS and cuDNN kernels. A
third-party device names its own backend module (``Device.backend``).
"""
