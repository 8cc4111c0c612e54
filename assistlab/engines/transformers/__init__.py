"""The transformers engine: loading and the model cache, the bundled pair, the private-API hooks, and paths/."""
