"""One module per trace format; each exposes `chunks(path, opts, bad) -> Iterator[Chunk]`."""
