"""Expectations beside the bounds: what a kernel, a step or a deployment is expected to take, from measurements.

- kernels: a device's measured kernel tables fitted to the roofline's own terms (KernelCalibration);
- serving_runs: a deployment's measured serving runs fitted to its bound (ServingCalibration);
- kernel_steps: a step composed bottom-up from the device's kernel fits (the rows as its kernels run them);
- engines: the per-step and per-request costs of an engine, fitted over every device with runs and carried to
  devices that have kernel tables but no runs;
- training_checks: the published training steps a composed training step was checked against.
"""
