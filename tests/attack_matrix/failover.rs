//! `Fallback` against the features around it (placeholder; filled below).
