class EdgetrainError(ValueError):
    """A problem with the user's model or arguments; the CLI prints it as one line and exits 2."""
