"""Where generation happens: model references and presets (catalog), and one folder per engine."""
