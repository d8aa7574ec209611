"""What every process shares and the store does not own: settings, the one clock, backoff, fault points."""
