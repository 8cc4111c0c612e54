"""Measuring: warm-up and interleaved timed runs, workloads, sweeps, the busy-machine watch, slots per device."""
