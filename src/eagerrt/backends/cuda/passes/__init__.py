"""The cuda backend's graph passes: fusions of what one of its kernels does in
one launch (a convolution and its ReLU, a residual sum and its layer norm), run
on a graph before it becomes a native plan."""
