"""The engine's version, apart from the package root so any module can read it without a cycle."""
__version__ = "0.1.0"
