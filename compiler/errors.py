class EdgetrainError(ValueError):
    """A problem with the user's model or arguments; the CLI prints it as one line and exits 2.
    Names from the model may hold line breaks or control characters: the message escapes them."""

    def __str__(self) -> str:
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in super().__str__())
