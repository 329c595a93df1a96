class EdgetrainError(ValueError):
    """A problem with the user's model or arguments; the CLI prints it as one line and exits 2.
    Names from the model may hold line breaks or control characters: the message escapes them."""

    def __str__(self) -> str:
        return "".join(c if c.isprintable() else repr(c)[1:-1] for c in super().__str__())


class DynamicShapeError(EdgetrainError):
    """Symbolic input dimensions left unfixed. The message names each one and how to fix it, in the
    spelling of the Python API; `cli_message` says the same in the command line's."""

    def __init__(self, dims: list[tuple[str, int, str]], batch_unset: bool):
        self.dims, self.batch_unset = dims, batch_unset
        super().__init__(self._text(cli=False))

    @property
    def cli_message(self) -> str:
        return str(EdgetrainError(self._text(cli=True)))

    def _text(self, cli: bool) -> str:
        def fix(name, axis, param):
            ways = [f"--dim {param}=SIZE" if cli else f"dim_values={{{param!r}: SIZE}}"] if param else []
            ways.append(f"--dim {name}:{axis}=SIZE" if cli else f"dim_values={{'{name}:{axis}': SIZE}}")
            if axis == 0 and self.batch_unset:
                ways.insert(0, "--batch-size SIZE" if cli else "batch_size=SIZE")
            return f"'{name}' axis {axis} ({param or '?'}): fix it with {' or '.join(ways)}"

        return "dynamic shape in input " + "; ".join(fix(*d) for d in self.dims)


class ImportNote(UserWarning):
    """Something the export did to the model that the user should know before training it (tied
    parameters, batch norms restored to training mode): one line each, before compiling."""
