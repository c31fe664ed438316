"""The roofline service: first-principles and measured performance bounds for accelerator workloads."""
