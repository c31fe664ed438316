"""Time as a serving engine and its benchmark client make it: a discrete-event simulation of requests arriving,
waiting for the scheduler, prefilling (in chunks, alone or beside decodes) and decoding in a continuous batch, whose
step times are a deployment's bounds as a calibration scales them. It gives percentiles (TTFT, TPOT, end-to-end)
where the steady-state line (expectations/serving_runs.py) gives one figure.

- workload.py: the lengths of the prompts and outputs, and how requests arrive (a closed loop at a concurrency, as
  benchmark clients run, or an open loop at a rate);
- engines.py: an engine's scheduler (chunked prefill, prefill-first or mixed steps, the cap on running requests,
  how often it looks for new requests, CUDA-graph batch sizes, the stream interval), with each engine's defaults
  read from its own code;
- step_model.py: the time of one step of any mix of decodes and prefill chunks, from a deployment's rows;
- engine_loop.py: the simulation itself, bounded before it runs;
- fit.py: the three numbers a calibration fits to measured runs through the simulation.
"""
