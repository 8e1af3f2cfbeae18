//! Chapter 13 figures (context): one per experiment, drawn from the results recorded in
//! `data/train/experiments/<id>/`.
