"""Arrays and files out: atomic writes, JSON, tables and plots. Knows arrays and files, not the
physics."""
