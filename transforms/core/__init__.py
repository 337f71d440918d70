"""Plain per-element functions and frozen specs: no Beam, no TensorFlow."""
