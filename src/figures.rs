//! Figures (placeholder, filled below).
