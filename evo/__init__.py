"""The engine: runs, strategies, the store, the CLI, and analysis (`evo.load_run`)."""


def __getattr__(name):
    # lazy: `import evo` stays cheap (no pandas) until load_run is used
    if name == "load_run":
        from evo.analysis import load_run

        return load_run
    raise AttributeError(f"module 'evo' has no attribute {name!r}")


__all__ = ["load_run"]
