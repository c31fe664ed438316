"""A training step on the roofline: forward, backward and optimizer rows, memory, collectives, time to train."""
