//! Chapter 13 figures (dynamics): one per experiment, drawn from the results recorded in
//! `data/train/experiments/<id>/`.
