"""The on-disk store: append-only logs, atomic state files, file locks, data-dir layout."""
