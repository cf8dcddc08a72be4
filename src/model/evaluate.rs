//! How a bound method fares against held-out samples (filled in with `wcetctl evaluate`).
