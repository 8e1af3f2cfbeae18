//! Chapter 12 — data (source S0 5.4, 5.6): filled in by the trainer work.
