"""Pure computational core: no HTTP, no database. SI units throughout (FLOP, bytes, seconds)."""
