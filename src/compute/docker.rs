//! Docker Compute Driver (placeholder; see issue 3).
