"""The pipeline's stages: pure functions over arrays, run by a backend."""
