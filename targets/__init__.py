"""Target descriptors (one make fragment per target) and board files, shipped inside the package."""
