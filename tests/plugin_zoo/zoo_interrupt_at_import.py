"""Raises KeyboardInterrupt while being imported."""
raise KeyboardInterrupt("plugin pretends Ctrl-C")
