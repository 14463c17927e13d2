"""Same answers: a saved project suggests the same across a change; Ray gives the local run's
lines."""
