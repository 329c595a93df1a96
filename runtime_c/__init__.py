"""C99 kernels pasted into every generated trainer, shipped inside the package."""
