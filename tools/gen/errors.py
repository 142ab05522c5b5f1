"""The generator's one error type: it always names the file and line it could not handle."""


class GenerationError(RuntimeError):
    pass


def located(coord, message: str) -> GenerationError:
    where = f"{coord.file}:{coord.line}" if coord is not None else "<unknown>"
    return GenerationError(f"{where}: {message}")
