"""The CPU backend's graph passes: each fuses work into generated numba code
(small-op regions, attention's merged heads, epilogues on products, elementwise
chains), run after the device-neutral passes (:mod:`eagerrt.graph.passes`)."""
